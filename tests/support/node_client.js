// A plain NATS client jet did not write (nats.js, the npm package "nats"), driven by
// tests/server/test_node_client.py: it publishes and requests on a stream subject and
// prints what came back as one JSON line. Usage: node node_client.js NATS_URL SUBJECT
const { connect, headers, StringCodec } = require("nats");

async function main() {
  const [url, subject] = process.argv.slice(2);
  const sc = StringCodec();
  const nc = await connect({ servers: url });
  const out = {};
  // 1. A plain message with a repeated header name (nats.js keeps both values).
  const multi = headers();
  multi.append("X-Multi", "a");
  multi.append("X-Multi", "b");
  nc.publish(subject, sc.encode("from node"), { headers: multi });
  // 2. A plain request: the JSON ack.
  const plain = await nc.request(subject, sc.encode("plain request"), { timeout: 10000 });
  out.plain = JSON.parse(sc.decode(plain.data));
  // 3. Header controls: ack ALL and a key.
  const ctl = headers();
  ctl.set("Jet-Ack", "all");
  ctl.set("Jet-Key", "user-1");
  const keyed = await nc.request(subject, sc.encode("keyed"), { headers: ctl, timeout: 10000 });
  out.keyed = JSON.parse(sc.decode(keyed.data));
  // 4. Optimistic concurrency: the right offset, then a stale one.
  const next = out.keyed.offset + 1;
  for (const [name, offset] of [["expected", next], ["stale", next]]) {
    const h = headers();
    h.set("Jet-Expected-Offset", String(offset));
    const reply = await nc.request(subject, sc.encode(name), { headers: h, timeout: 10000 });
    out[name] = JSON.parse(sc.decode(reply.data));
  }
  // 5. Deduplication by Nats-Msg-Id: the resend is acked as a duplicate, not stored.
  for (const name of ["first", "resend"]) {
    const h = headers();
    h.set("Nats-Msg-Id", "order-17");
    const reply = await nc.request(subject, sc.encode(name), { headers: h, timeout: 10000 });
    out[name] = JSON.parse(sc.decode(reply.data));
  }
  await nc.drain();
  console.log(JSON.stringify(out));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
