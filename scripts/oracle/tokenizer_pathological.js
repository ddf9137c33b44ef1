// Times Hugging Face's Node binding (npm tokenizers, the Rust core) on one
// call per input, for the pathological-input benchmark (kvgate bench
// --only pathological): each input is encoded once after a warm-up on a
// short text, and its ids are summarised by a checksum the Go side
// computes the same way, so the table can say the two agree.
// usage: node tokenizer_pathological.js <oracle dir> <tokenizer.json> <inputs .jsonl>
// input lines: {"name":…, "text":…}; prints one JSON line per input:
// {"name":…, "tokens":…, "checksum":…, "seconds":…}
'use strict';
const fs = require('fs');
const path = require('path');
const [oracleDir, tokPath, inputsPath] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(oracleDir, 'node_modules', 'tokenizers'));

// checksum: h = h*31 + id + 1 over the ids, mod 2^32.
function checksum(ids) {
  let h = 0;
  for (const id of ids) h = (Math.imul(h, 31) + id + 1) >>> 0;
  return h;
}

(async () => {
  const tok = Tokenizer.fromFile(tokPath);
  await tok.encode('warm up', null, { addSpecialTokens: false });
  const lines = fs.readFileSync(inputsPath, 'utf8').split('\n').filter((l) => l.trim());
  for (const line of lines) {
    const { name, text } = JSON.parse(line);
    const start = process.hrtime.bigint();
    const enc = await tok.encode(text, null, { addSpecialTokens: false });
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    const ids = enc.getIds();
    console.log(JSON.stringify({ name, tokens: ids.length, checksum: checksum(ids), seconds }));
  }
})().catch((e) => { console.error(e); process.exit(1); });
