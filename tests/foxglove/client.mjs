// A Foxglove WebSocket client built from Foxglove's own libraries, for tests/it/foxglove.rs:
// @foxglove/ws-protocol over the `ws` package, @foxglove/rosmsg to parse each advertised
// schema, @foxglove/rosmsg2-serialization to decode each message. A JSON channel (an
// ArduPilot log's, `json` with a `jsonschema`) is read as JSON, each message held against its
// schema: the same keys, each of its type (a message that is not counts in `trailing`).
//
// Usage: node client.mjs URL SUBPROTOCOL [STALL_MS]   (env LINGER_MS: see below)
//
// With STALL_MS, it stops reading STALL_MS after the first topic channels (and prints
// `stalled`), as a client on a slow link would, until it gets SIGUSR2.
//
// Subscribes to every channel as it is advertised. Prints `ready` on stderr once it has the
// first advertisement (the /log channel) and has subscribed to it, and `topics` once it has
// subscribed to the first topic channels. When the last topic
// channel of a log is unadvertised (the log ended), and LINGER_MS more (the findings of the
// flight diagnostics come after the samples they rest on), prints one JSON object on stdout
// and exits: per channel its topic, schema name, message count, first and last decoded
// message, first and last log time (ns, as a string), the count of messages whose log time is
// not their `timestamp` field (or their stamp) in ns, and of messages the reader did not
// consume to the end; the /log messages; the /diagnostics messages with their log times; the
// status messages; the subprotocol the server chose.

import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { FoxgloveClient } = require("@foxglove/ws-protocol");
const { parse } = require("@foxglove/rosmsg");
const { MessageReader } = require("@foxglove/rosmsg2-serialization");
const WebSocket = require("ws");

const [url, subprotocol, stallMs] = process.argv.slice(2);
const ws = new WebSocket(url, [subprotocol]);
const client = new FoxgloveClient({ ws });

const channels = new Map(); // channel id -> state
const subscriptions = new Map(); // subscription id -> channel state
const finished = []; // states of unadvertised channels
const logs = [];
const diagnostics = [];
const statuses = [];
const lingerMs = Number(process.env.LINGER_MS ?? 0);
// Channels that stay advertised for as long as the server runs.
const serverChannels = new Set(["/log", "/diagnostics"]);
let topicChannels = 0;
let sawTopics = false;
let ready = false;
let reported = false;
let announcedTopics = false;

// JSON-safe copy of a decoded message: typed arrays as arrays, 64-bit integers as numbers
// when exact and as decimal strings otherwise, non-finite floats as "nan" / "inf" / "-inf".
function plain(value) {
  if (typeof value === "bigint") {
    return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER)
      ? Number(value)
      : value.toString();
  }
  if (typeof value === "number") {
    if (Number.isNaN(value)) return "nan";
    if (!Number.isFinite(value)) return value > 0 ? "inf" : "-inf";
    return value;
  }
  if (typeof value === "boolean") return value ? 1 : 0;
  if (ArrayBuffer.isView(value) || Array.isArray(value)) return Array.from(value, plain);
  if (value !== null && typeof value === "object") {
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = plain(v);
    return out;
  }
  return value;
}

function report() {
  if (reported) return;
  reported = true;
  const all = [...finished, ...channels.values()].map((c) => ({
    topic: c.topic,
    schemaName: c.schemaName,
    count: c.count,
    first: c.first,
    last: c.last,
    firstLogTime: c.firstLogTime,
    lastLogTime: c.lastLogTime,
    timeMismatches: c.timeMismatches,
    trailing: c.trailing,
  }));
  const text =
    JSON.stringify({ subprotocol: ws.protocol, channels: all, logs, diagnostics, statuses }) + "\n";
  client.close();
  // Exit once the whole report is out (a pipe takes 64 KB at a time).
  process.stdout.write(text, () => process.exit(0));
}

// A JSON channel's reader, with the interface of MessageReader: a message that does not
// follow its schema (other keys, or a value of another type) counts as having trailing bytes.
class JsonReader {
  constructor(schema) {
    this.properties = schema.properties;
    this.bad = false;
  }
  readMessage(data) {
    const message = JSON.parse(new TextDecoder().decode(data));
    const keys = Object.keys(message);
    const types = {
      integer: (v) => Number.isInteger(v),
      number: (v) => typeof v === "number" || v === null,
      string: (v) => typeof v === "string",
      array: (v) => Array.isArray(v),
    };
    this.bad =
      keys.join() !== Object.keys(this.properties).join() ||
      keys.some((k) => !types[this.properties[k].type](message[k]));
    return message;
  }
  lastReadHadTrailingBytes() {
    return this.bad;
  }
}

let stalled = null;
process.on("SIGUSR2", () => {
  ws.resume();
  clearInterval(stalled);
});
client.on("error", (e) => {
  console.error(`foxglove client: ${e}`);
  process.exit(2);
});
client.on("close", () => {
  if (!reported) {
    console.error("foxglove client: the server closed the connection");
    report();
  }
});
client.on("status", (s) => statuses.push(s));
client.on("advertise", (list) => {
  for (const ch of list) {
    let reader;
    if (ch.encoding === "cdr" && ch.schemaEncoding === "ros2msg") {
      reader = new MessageReader(parse(ch.schema, { ros2: true }));
    } else if (ch.encoding === "json" && ch.schemaEncoding === "jsonschema") {
      reader = new JsonReader(JSON.parse(ch.schema));
    } else {
      console.error(`foxglove client: ${ch.topic}: encoding ${ch.encoding}/${ch.schemaEncoding}`);
      process.exit(2);
    }
    const state = {
      topic: ch.topic,
      schemaName: ch.schemaName,
      reader,
      count: 0,
      first: null,
      last: null,
      firstLogTime: null,
      lastLogTime: null,
      timeMismatches: 0,
      trailing: 0,
    };
    channels.set(ch.id, state);
    subscriptions.set(client.subscribe(ch.id), state);
    if (!serverChannels.has(ch.topic)) {
      topicChannels += 1;
      sawTopics = true;
    }
  }
  if (!ready) {
    ready = true;
    console.error("ready");
  } else if (list.some((ch) => !serverChannels.has(ch.topic)) && !announcedTopics) {
    announcedTopics = true;
    console.error("topics");
    if (stallMs !== undefined) {
      setTimeout(() => {
        ws.pause();
        // A paused socket does not keep Node running: a timer does, until SIGUSR2.
        stalled = setInterval(() => {}, 1000);
        console.error("stalled");
      }, Number(stallMs));
    }
  }
});
client.on("unadvertise", (ids) => {
  for (const id of ids) {
    const state = channels.get(id);
    if (!state) continue;
    channels.delete(id);
    finished.push(state);
    if (!serverChannels.has(state.topic)) topicChannels -= 1;
  }
  if (sawTopics && topicChannels === 0) setTimeout(report, lingerMs);
});
client.on("message", ({ subscriptionId, timestamp, data }) => {
  const state = subscriptions.get(subscriptionId);
  if (!state) {
    console.error(`foxglove client: a message for unknown subscription ${subscriptionId}`);
    process.exit(2);
  }
  const message = state.reader.readMessage(data);
  if (state.reader.lastReadHadTrailingBytes()) state.trailing += 1;
  const value = plain(message);
  state.count += 1;
  if (state.first === null) {
    state.first = value;
    state.firstLogTime = timestamp.toString();
  }
  state.last = value;
  state.lastLogTime = timestamp.toString();
  if (state.topic === "/log") {
    logs.push(value);
    const stampNs = BigInt(message.stamp.sec) * 1000000000n + BigInt(message.stamp.nanosec);
    if (stampNs !== timestamp) state.timeMismatches += 1;
  } else if (state.topic === "/diagnostics") {
    diagnostics.push({ logTime: timestamp.toString(), message: value });
    const stamp = message.header.stamp;
    const stampNs = BigInt(stamp.sec) * 1000000000n + BigInt(stamp.nanosec);
    if (stampNs !== timestamp) state.timeMismatches += 1;
  } else if (message.timestamp !== undefined && BigInt(message.timestamp) * 1000n !== timestamp) {
    state.timeMismatches += 1;
  } else if (message.TimeUS !== undefined && BigInt(message.TimeUS) * 1000n !== timestamp) {
    state.timeMismatches += 1;
  }
});
