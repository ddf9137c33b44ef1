// Independent implementation of Dynamo's block hashing (hash-wasm's XXH3,
// a WebAssembly build of the reference C code) used to generate golden
// vectors for kv/blockhash. Run by scripts/golden-hash.sh.
//
// Written from ai-dynamo/dynamo at commit
// 038eab23a6b6e9b6391de6640f4f69d4c2726681, not from kvgate:
//   lib/kv-router/src/protocols.rs
//     compute_block_hash_for_seq: each complete block of tokens, u32
//       little-endian, XXH3-64 under block_hash_seed(options);
//     block_hash_seed -> dynamo_kv_hashing::compute_salt_hash(
//       cache_namespace, lora_name);
//     compute_seq_hash_for_block: seq[0] = block[0], then
//       compute_next_seq_hash(parent, block), which delegates to
//       dynamo_tokens::compute_next_sequence_hash(parent, block): XXH3-64 of
//       le64(parent) ++ le64(block) under the fixed CHAIN_XXH3_SEED; the salt
//       is NOT the chain seed.
//   lib/kv-hashing/src/salt.rs compute_salt_hash(salt, lora_name):
//     empty strings count as absent; seed = CHAIN_XXH3_SEED (1337),
//     wrapping_add compute_hash_v2(lora_name, 0), then wrapping_add
//     compute_hash_v2(salt, 1); compute_hash_v2 = xxh3_64_with_seed.
import { createXXHash3 } from 'hash-wasm';
import { writeFileSync } from 'node:fs';

const MASK = (1n << 64n) - 1n;

async function xxh3(bytes, seed) {
  seed = BigInt.asUintN(64, seed);
  const h = await createXXHash3(Number(seed & 0xffffffffn), Number(seed >> 32n));
  h.init();
  h.update(bytes);
  return BigInt('0x' + h.digest('hex'));
}

function le32(tokens) {
  const b = new Uint8Array(tokens.length * 4);
  const v = new DataView(b.buffer);
  tokens.forEach((t, i) => v.setUint32(4 * i, t, true));
  return b;
}

function le64pair(a, b) {
  const out = new Uint8Array(16);
  const v = new DataView(out.buffer);
  v.setBigUint64(0, a, true);
  v.setBigUint64(8, b, true);
  return out;
}

const CHAIN_XXH3_SEED = 1337n;

async function hashRequest({ tokens, block_size, lora, namespace }) {
  let seed = CHAIN_XXH3_SEED;
  const enc = new TextEncoder();
  if (lora) seed = (seed + (await xxh3(enc.encode(lora), 0n))) & MASK;
  if (namespace) seed = (seed + (await xxh3(enc.encode(namespace), 1n))) & MASK;
  const local = [];
  for (let i = 0; i + block_size <= tokens.length; i += block_size) {
    local.push(await xxh3(le32(tokens.slice(i, i + block_size)), seed));
  }
  const sequence = [];
  for (let i = 0; i < local.length; i++) {
    // compute_next_sequence_hash: always CHAIN_XXH3_SEED, never the salted seed.
    sequence.push(i === 0 ? local[0] : await xxh3(le64pair(sequence[i - 1], local[i]), CHAIN_XXH3_SEED));
  }
  return { local, sequence };
}

// mulberry32: a small seeded PRNG so the vectors are reproducible.
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const rand = rng(20261201);
const names = ['', '', 'my-lora', 'sql-adapter-v2', 'ünïcödé-адаптер', '日本語', 'a', '🦙'];
const cases = [{ tokens: [1, 2, 3, 4], block_size: 4 }];
for (let i = 0; i < 400; i++) {
  const block_size = [1, 2, 3, 4, 16, 32, 64, 128][Math.floor(rand() * 8)];
  const n = Math.floor(rand() * block_size * 9);
  const tokens = Array.from({ length: n }, () =>
    rand() < 0.1 ? 4294967295 - Math.floor(rand() * 3) : Math.floor(rand() * 152000));
  const c = { tokens, block_size };
  const lora = names[Math.floor(rand() * names.length)];
  const ns = names[Math.floor(rand() * names.length)];
  if (lora) c.lora = lora;
  if (ns) c.namespace = ns;
  cases.push(c);
}

const lines = [];
for (const c of cases) {
  const { local, sequence } = await hashRequest(c);
  // uint64 written as decimal JSON numbers, exactly as `kvgate hash` prints them.
  const want = `{"local":[${local.join(',')}],"sequence":[${sequence.join(',')}]}`;
  lines.push(JSON.stringify({ input: c, want: '@@' }).replace('"@@"', want));
}
writeFileSync(process.argv[2], lines.join('\n') + '\n');
console.log(`wrote ${lines.length} vectors to ${process.argv[2]}`);
