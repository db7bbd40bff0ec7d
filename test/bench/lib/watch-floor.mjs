// The floor of the daemon's CPU while kubelets rewrite every Node's status: a bare Node.js process
// that watches the same Nodes on the same API server and does the least any watcher must do with
// each event: receive it (HTTP, chunked) and JSON.parse it. Nothing is kept, nothing compared.
// cluster.mjs runs it beside the daemon, on the embedded Node with the daemon's V8 flags, and
// reads its CPU over the same window.
//
//   node watch-floor.mjs <API URL> <n> [<CA file>]   (an https:// URL: its certificate checked against the CA)
// Prints "watching" once the watch's response has begun, "received <n>" once n events came;
// exits on SIGTERM.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';

const url = process.argv[2];
const expected = Number(process.argv[3]);
const { get, options } = url.startsWith('https:') ? { get: https.get, options: { ca: readFileSync(process.argv[4]) } } : { get: http.get, options: {} };

function getJson(path) {
  return new Promise((resolve, reject) => {
    get(`${url}${path}`, options, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (body += c));
      res.on('end', () => (res.statusCode === 200 ? resolve(JSON.parse(body)) : reject(new Error(`GET ${path}: ${res.statusCode} ${body}`))));
    }).on('error', reject);
  });
}

// From the list's resourceVersion: only what changes from now on, no initial ADDED for every Node.
const { metadata } = await getJson('/api/v1/nodes?limit=1');
let events = 0;
let partial = Buffer.alloc(0);
get(`${url}/api/v1/nodes?watch=1&allowWatchBookmarks=true&resourceVersion=${encodeURIComponent(metadata.resourceVersion)}`, options, (res) => {
  if (res.statusCode !== 200) throw new Error(`watch: HTTP ${res.statusCode}`);
  res.on('data', (chunk) => {
    const data = partial.length ? Buffer.concat([partial, chunk]) : chunk;
    let start = 0;
    for (let nl = data.indexOf(10); nl >= 0; nl = data.indexOf(10, start)) {
      JSON.parse(data.toString('utf8', start, nl));
      if (++events === expected) console.log(`received ${events}`);
      start = nl + 1;
    }
    partial = data.subarray(start);
  });
  console.log('watching');
}).on('error', (err) => {
  console.error(`watch-floor: ${err.message}`);
  process.exit(1);
});
process.once('SIGTERM', () => process.exit(0));
