// A trivial Node.js server answering the requests a client of a store makes.
//
// bench/store_bench.py (section `yardstick`) measures it on this machine with the same
// load as our store. The reference store is Node too, one process, and does strictly
// more per request than this (authentication, metadata lookups, multipart parsing,
// archive checks), so what this server does here is an upper bound of what the
// reference store could do on this machine.
//
//   GET  /health                   200 "ok"
//   GET  /api/brains               200, a fixed JSON list of 4 brain records
//   GET  /api/brains/small/sync    304 + ETag when If-None-Match names the ETag,
//                                  else the 100 KiB body from memory
//   GET  /api/brains/big/sync      the 5 MiB body from memory
//   PUT  /api/brains/<id>/sync     a durable upload (see upload() below)
//
// Usage: node node_server.js --port P --small FILE --big FILE --uploads DIR
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');
const fsp = require('node:fs/promises');
const http = require('node:http');
const path = require('node:path');

function parseArgs(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i += 2) {
    args[argv[i].replace(/^--/, '')] = argv[i + 1];
  }
  for (const name of ['port', 'small', 'big', 'uploads']) {
    if (!args[name]) throw new Error(`missing --${name}`);
  }
  return args;
}

const args = parseArgs(process.argv.slice(2));
// Bodies are read once and sent from memory: the cheapest way to answer a download.
const small = fs.readFileSync(args.small);
const big = fs.readFileSync(args.big);
const etag = `"${crypto.createHash('sha256').update(small).digest('hex')}"`;

function brainRecord(index) {
  // Shaped like one record of our GET /api/brains answer (store/service.py brain_record).
  return {
    id: `0190b6c2-7d1e-7a3b-9c4d-00000000000${index}`,
    name: `brain ${index}`,
    size_bytes: small.length,
    file_count: 16,
    checksum: etag.slice(1, -1),
    last_synced_at: '2026-11-30T10:00:00Z',
    created_at: '2026-11-01T09:00:00Z',
    snapshot_count: 5,
    stored_bytes: small.length * 6,
  };
}

const list = Buffer.from(JSON.stringify([0, 1, 2, 3].map(brainRecord)));
let uploadCounter = 0;

function send(res, status, body, type) {
  res.writeHead(status, { 'Content-Type': type, 'Content-Length': body.length });
  res.end(body);
}

// The minimum a durable store must do with an upload: stream the body to a temporary
// file while hashing it, fsync the file, rename it into place, fsync the directory.
// No multipart parsing: the whole request body is treated as the archive, which only
// makes this cheaper than a real store.
async function upload(req, res, id) {
  const final = path.join(args.uploads, `${id}.bin`);
  const temp = path.join(args.uploads, `.${id}.${process.pid}.${uploadCounter++}.tmp`);
  const hash = crypto.createHash('sha256');
  const file = await fsp.open(temp, 'w');
  try {
    for await (const chunk of req) {
      hash.update(chunk);
      await file.write(chunk);
    }
    await file.sync();
  } finally {
    await file.close();
  }
  await fsp.rename(temp, final);
  const dir = await fsp.open(args.uploads, 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
  send(res, 200, Buffer.from(JSON.stringify({ checksum: hash.digest('hex') })), 'application/json');
}

function handle(req, res) {
  const url = req.url;
  if (req.method === 'GET') {
    if (url === '/api/brains') return send(res, 200, list, 'application/json');
    if (url === '/api/brains/small/sync') {
      if (req.headers['if-none-match'] === etag) {
        res.writeHead(304, { ETag: etag });
        return res.end();
      }
      return send(res, 200, small, 'application/gzip');
    }
    if (url === '/api/brains/big/sync') return send(res, 200, big, 'application/gzip');
    if (url === '/health') return send(res, 200, Buffer.from('ok'), 'text/plain');
  }
  const match = /^\/api\/brains\/([A-Za-z0-9-]+)\/sync$/.exec(url);
  if (req.method === 'PUT' && match) {
    return upload(req, res, match[1]).catch((err) => {
      if (!res.headersSent) send(res, 500, Buffer.from(String(err)), 'text/plain');
      else res.destroy();
    });
  }
  send(res, 404, Buffer.from('not found'), 'text/plain');
}

const server = http.createServer(handle);
// wrk keeps its 32 connections open for the whole test: no idle timeout in between.
server.keepAliveTimeout = 60_000;
server.listen(Number(args.port), '127.0.0.1');
process.on('SIGTERM', () => server.close(() => process.exit(0)));
