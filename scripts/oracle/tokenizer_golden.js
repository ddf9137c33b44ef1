// Writes the tokenizer goldens from Hugging Face's official Node binding
// (npm tokenizers, the Rust core): token ids for the corpus and the fuzz set
// for each model, the binding's own per-code-point character classes as the
// Split regex sees them, and its NFC results for every code point.
// usage: node tokenizer_golden.js <repo root> <oracle dir>
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const [root, oracleDir] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(oracleDir, 'node_modules', 'tokenizers'));
const { corpus, fuzz } = require('./tokenizer_corpus.js');

const models = path.join(root, '.cache', 'models');
const out = path.join(root, 'extproc', 'tokenizer', 'testdata');
fs.mkdirSync(out, { recursive: true });

const CORPUS_SEED = 20260501;
const FUZZ_SEED = 977; // deliberately unrelated to CORPUS_SEED
const FUZZ_N = 3000;

function write(file, lines) {
  const body = lines.join('\n') + '\n';
  if (body.length > 5 << 20) {
    fs.writeFileSync(path.join(out, file + '.gz'), zlib.gzipSync(body, { level: 9 }));
    try { fs.unlinkSync(path.join(out, file)); } catch (e) {}
    console.log(`wrote ${file}.gz (${lines.length} lines)`);
  } else {
    fs.writeFileSync(path.join(out, file), body);
    try { fs.unlinkSync(path.join(out, file + '.gz')); } catch (e) {}
    console.log(`wrote ${file} (${lines.length} lines)`);
  }
}

async function goldens(model, tok) {
  // add_special_tokens=true, for the post-processor template (Llama-3's BOS).
  const special = [];
  for (const text of corpus(CORPUS_SEED).slice(0, 60)) {
    const enc = await tok.encode(text, null, { addSpecialTokens: true });
    special.push(JSON.stringify({ text, ids: enc.getIds() }));
  }
  write(`golden_special_${model}.jsonl`, special);

  for (const [name, texts] of [['golden', corpus(CORPUS_SEED)], ['golden_fuzz', fuzz(FUZZ_SEED, FUZZ_N)]]) {
    const lines = [];
    for (const text of texts) {
      const enc = await tok.encode(text, null, { addSpecialTokens: false });
      lines.push(JSON.stringify({ text, ids: enc.getIds() }));
    }
    write(`${name}_${model}.jsonl`, lines);
  }
}

// Classify each code point the way the Split pattern's \p{L}, \p{N} and \s
// see it, by observing how the binding's pre-tokenizer splits probes:
//   "1"+c is one piece under \p{N}{1,3} (Llama-3) only when c is N;
//   "a"+c is one piece only when c is L ([^\r\n\p{L}\p{N}]?\p{L}+ or \p{L}+);
//   "!"+c is one piece when c is neither whitespace nor N (it is then L or other).
function classes(qwen, llama) {
  const pq = qwen.getPreTokenizer();
  const pl = llama.getPreTokenizer();
  const ranges = [];
  let cur = null;
  for (let cp = 0; cp <= 0x10ffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const c = String.fromCodePoint(cp);
    let k;
    if (pl.preTokenizeString('1' + c).length === 1) k = 'N';
    else if (pq.preTokenizeString('a' + c).length === 1) k = 'L';
    else if (pq.preTokenizeString('!' + c).length === 1) k = 'O';
    else k = 'S';
    if (cur && cur.k === k && cur.hi === cp - 1) cur.hi = cp;
    else if (cur && cur.k === k && cur.hi === 0xd7ff && cp === 0xe000) cur.hi = cp;
    else { cur = { lo: cp, hi: cp, k }; ranges.push(cur); }
  }
  write('unicode_classes.txt', ranges.map((r) => `${r.lo.toString(16)} ${r.hi.toString(16)} ${r.k}`));
}

// NFC probes per code point: c alone, "x"+c+U+0334 (canonical reordering
// against a ccc=1 mark), c+U+0301 and c+U+0334 (composition with a following
// mark, and the golang/go#81028 supplementary-starter case). Only code points
// where some probe changes are written; every other code point must be left
// unchanged by the Go normalizer.
function nfc(qwen) {
  const n = qwen.getNormalizer();
  const hex = (s) => Array.from(s, (ch) => ch.codePointAt(0).toString(16)).join(' ');
  const lines = [];
  for (let cp = 0; cp <= 0x10ffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const c = String.fromCodePoint(cp);
    const probes = [c, 'x' + c + '\u0334', c + '\u0301', c + '\u0334'];
    const got = probes.map((p) => n.normalizeString(p));
    if (got.some((g, i) => g !== probes[i])) lines.push(cp.toString(16) + '\t' + got.map(hex).join('\t'));
  }
  write('nfc_probes.txt', lines);
}

// Added-token flags (lstrip, rstrip, single_word, normalized) that the
// shipped models do not use: the Qwen3 file plus the tokens below, encoded by
// the binding. The Go test appends the same tokens (read from this golden).
async function addedFlags() {
  const base = JSON.parse(fs.readFileSync(path.join(models, 'qwen3', 'tokenizer.json'), 'utf8'));
  const flags = (o) => Object.assign({ single_word: false, lstrip: false, rstrip: false, normalized: false, special: false }, o);
  const extra = [
    flags({ id: 151700, content: '<mask>', single_word: true, lstrip: true, rstrip: true }),
    flags({ id: 151701, content: '[SW]', single_word: true }),
    flags({ id: 151702, content: '<ls>', lstrip: true, special: true }),
    flags({ id: 151703, content: '<rs>', rstrip: true }),
    flags({ id: 151704, content: 'Caf\u00e9', normalized: true }),
    flags({ id: 151705, content: '\u00c5ngstr', normalized: false }),
    flags({ id: 151706, content: '<|im_start|>sys' }),
    flags({ id: 151707, content: 'ab' }),
    flags({ id: 151708, content: 'lo\u0301w', normalized: true }),
  ];
  base.added_tokens.push(...extra);
  const tmp = path.join(oracleDir, 'added_flags_tokenizer.json');
  fs.writeFileSync(tmp, JSON.stringify(base));
  const tok = Tokenizer.fromFile(tmp);
  const frags = ['<mask>', '[SW]', '<ls>', '<rs>', 'Caf\u00e9', 'Cafe\u0301', '\u00c5ngstr', 'A\u030angstr', '<|im_start|>', '<|im_start|>sys', 'ab', 'abc', 'lo\u0301w', 'l\u00f3w',
    ' ', '  ', '\t', '\n', '\u2000', 'x', 'word', '_', '1', '-', '\u0301', '\u00e9', ',', '\u200d'];
  const r = require('./tokenizer_corpus.js').rng(4242);
  const cases = [];
  for (const a of frags) for (const b of frags) cases.push(a + b);
  for (let i = 0; i < 1500; i++) {
    let s = '';
    const n = 2 + Math.floor(r() * 7);
    for (let k = 0; k < n; k++) s += frags[Math.floor(r() * frags.length)];
    cases.push(s);
  }
  const lines = [JSON.stringify({ added_tokens: extra })];
  for (const text of cases) {
    const enc = await tok.encode(text, null, { addSpecialTokens: false });
    lines.push(JSON.stringify({ text, ids: enc.getIds() }));
  }
  fs.unlinkSync(tmp);
  write('golden_added_flags.jsonl', lines);
}

(async () => {
  await addedFlags();
  const qwen = Tokenizer.fromFile(path.join(models, 'qwen3', 'tokenizer.json'));
  const llama = Tokenizer.fromFile(path.join(models, 'llama3_1', 'tokenizer.json'));
  await goldens('qwen3', qwen);
  await goldens('llama3_1', llama);
  classes(qwen, llama);
  nfc(qwen);
})().catch((e) => { console.error(e); process.exit(1); });
