// Measures Hugging Face's Node binding (npm tokenizers) on a golden corpus
// with encodeBatch, the binding's fastest path. Thread count is set by the
// caller through RAYON_NUM_THREADS / TOKENIZERS_PARALLELISM.
// usage: node tokenizer_bench.js <oracle dir> <tokenizer.json> <golden .jsonl> <min seconds>
// prints one JSON line: {"tokens":…, "seconds":…, "tokens_per_s":…, "passes":…}
'use strict';
const fs = require('fs');
const path = require('path');
const [oracleDir, tokPath, corpusPath, minSeconds] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(oracleDir, 'node_modules', 'tokenizers'));

(async () => {
  const tok = Tokenizer.fromFile(tokPath);
  const texts = fs.readFileSync(corpusPath, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l).text);
  await tok.encodeBatch(texts, { addSpecialTokens: false }); // warm-up
  let tokens = 0;
  let passes = 0;
  const start = process.hrtime.bigint();
  let seconds = 0;
  while (seconds < Number(minSeconds)) {
    const encs = await tok.encodeBatch(texts, { addSpecialTokens: false });
    for (const e of encs) tokens += e.getLength();
    passes++;
    seconds = Number(process.hrtime.bigint() - start) / 1e9;
  }
  console.log(JSON.stringify({ tokens, seconds, tokens_per_s: tokens / seconds, passes }));
})().catch((e) => { console.error(e); process.exit(1); });
