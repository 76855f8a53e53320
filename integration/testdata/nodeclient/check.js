// Runs the official Node client of EventStoreDB against the event store at
// the connection string given as the first argument: an append (the
// client's BatchAppend), a Delete and a Tombstone with a wrong expected
// revision must each settle, with the client's WrongExpectedVersionError. Prints one JSON line per check and
// exits non-zero if any failed or never settled.
"use strict";

const {
  EventStoreDBClient,
  jsonEvent,
  NO_STREAM,
  WrongExpectedVersionError,
} = require("@eventstore/db-client");

const connection = process.argv[2];
const settleWithin = 10000;
let failed = false;

process.on("uncaughtException", (err) => {
  console.log(JSON.stringify({ check: "uncaught", ok: false, error: String(err && err.stack || err) }));
  process.exit(2);
});

function withinTime(promise) {
  return Promise.race([
    promise.then(() => ({ settled: true, error: null }), (error) => ({ settled: true, error })),
    new Promise((resolve) => setTimeout(() => resolve({ settled: false }), settleWithin)),
  ]);
}

async function expectWrongVersion(name, stream, call) {
  const r = await withinTime(call());
  const ok = r.settled && r.error instanceof WrongExpectedVersionError && r.error.streamName === stream;
  if (!ok) failed = true;
  console.log(JSON.stringify({
    check: name,
    ok,
    settled: r.settled,
    error: r.settled && r.error ? `${r.error.name}: ${r.error.message}` : null,
    streamName: r.error && r.error.streamName,
    expectedVersion: r.error && r.error.expectedVersion !== undefined ? String(r.error.expectedVersion) : null,
    actualVersion: r.error && r.error.actualVersion !== undefined ? String(r.error.actualVersion) : null,
  }));
}

async function main() {
  const client = EventStoreDBClient.connectionString(connection);
  const stream = `node-wev-${Date.now()}`;
  await client.appendToStream(stream, [
    jsonEvent({ type: "E", data: { n: 0 } }),
    jsonEvent({ type: "E", data: { n: 1 } }),
  ]);
  await expectWrongVersion("append", stream, () => client.appendToStream(stream, [jsonEvent({ type: "E", data: {} })], { expectedRevision: NO_STREAM }));
  await expectWrongVersion("delete", stream, () => client.deleteStream(stream, { expectedRevision: NO_STREAM }));
  await expectWrongVersion("tombstone", stream, () => client.tombstoneStream(stream, { expectedRevision: BigInt(7) }));
  await client.dispose();
  process.exit(failed ? 1 : 0);
}

main().catch((err) => {
  console.log(JSON.stringify({ check: "setup", ok: false, error: String(err && err.stack || err) }));
  process.exit(1);
});
