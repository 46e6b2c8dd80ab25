// A plain nats.js publisher that routes keys as every jet client does (spec/partitioning.md):
// partition = (murmur2(key) & 0x7fffffff) % partitions, published on that partition's
// subject (SUBJECT for partition 0, SUBJECT.p otherwise) with Jet-Key and Jet-Ack: all.
// Usage: node node_keyed.js NATS_URL SUBJECT PARTITIONS KEY...; prints one JSON line
// {key: {"partition": p, "ack": <the JSON ack>}}. Also checks murmur2 against the spec's
// vectors first (a wrong port of the hash must not pass as a jet bug).
const { connect, headers, StringCodec } = require("nats");

function murmur2(data) {
  const m = 0x5bd1e995;
  let h = (0x9747b28c ^ data.length) | 0;
  const blocks = data.length >> 2;
  for (let i = 0; i < blocks; i++) {
    const j = i * 4;
    let k = data[j] | (data[j + 1] << 8) | (data[j + 2] << 16) | (data[j + 3] << 24);
    k = Math.imul(k, m);
    k ^= k >>> 24;
    k = Math.imul(k, m);
    h = Math.imul(h, m) ^ k;
  }
  const base = blocks * 4;
  const rest = data.length % 4;
  if (rest === 3) h ^= data[base + 2] << 16;
  if (rest >= 2) h ^= data[base + 1] << 8;
  if (rest >= 1) {
    h ^= data[base];
    h = Math.imul(h, m);
  }
  h ^= h >>> 13;
  h = Math.imul(h, m);
  h ^= h >>> 15;
  return h | 0;
}

const VECTORS = { "": 275646681, abc: 479470107, "21": -973932308, foobar: -790332482 };

async function main() {
  const [url, subject, partitionsArg, ...keys] = process.argv.slice(2);
  const partitions = Number(partitionsArg);
  const enc = new TextEncoder();
  for (const [key, want] of Object.entries(VECTORS)) {
    const got = murmur2(enc.encode(key));
    if (got !== want) throw new Error(`murmur2(${JSON.stringify(key)}) = ${got}, not ${want}`);
  }
  const sc = StringCodec();
  const nc = await connect({ servers: url });
  const out = {};
  for (const key of keys) {
    const partition = (murmur2(enc.encode(key)) & 0x7fffffff) % partitions;
    const h = headers();
    h.set("Jet-Key", key);
    h.set("Jet-Ack", "all");
    const target = partition === 0 ? subject : `${subject}.${partition}`;
    const reply = await nc.request(target, sc.encode(`node ${key}`), { headers: h, timeout: 10000 });
    out[key] = { partition, ack: JSON.parse(sc.decode(reply.data)) };
  }
  await nc.drain();
  console.log(JSON.stringify(out));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
