// Closes the loop for `kvgate tokenize --chat`: for every golden chat case
// (prompt rendered by Python jinja2, scripts/golden-chat.sh), the token ids
// Hugging Face's official binding gives for that prompt, with special
// tokens in the text matched and none added — what vLLM does for chat.
// Usage: node chat_ids.js <repo root> <oracle dir>
const fs = require('fs');
const path = require('path');
const [root, oracleDir] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(oracleDir, 'node_modules', 'tokenizers'));

(async () => {
  const models = process.env.KVGATE_MODELS_DIR || path.join(root, '.cache', 'models');
  const src = path.join(root, 'extproc', 'chattemplate', 'testdata', 'golden_chat.jsonl');
  const toks = {};
  const out = [];
  for (const line of fs.readFileSync(src, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    const c = JSON.parse(line);
    // Cases that must fail, and cases with their own template (engine-bug probes), are not CLI cases.
    if (c.error || c.template || typeof c.expected !== 'string') continue;
    toks[c.model] ??= Tokenizer.fromFile(path.join(models, c.model, 'tokenizer.json'));
    const enc = await toks[c.model].encode(c.expected, null, { addSpecialTokens: false });
    // Requests and prompts stay in golden_chat.jsonl (written by Python, whose
    // number literals JSON.stringify would not preserve: 1.0 would become 1).
    out.push(JSON.stringify({ name: c.name, model: c.model, ids: enc.getIds() }));
  }
  const dst = path.join(root, 'extproc', 'preprocess', 'testdata', 'golden_chat_ids.jsonl');
  fs.writeFileSync(dst, out.join('\n') + '\n');
  console.log(`wrote ${out.length} chat cases to ${dst}`);
})();
