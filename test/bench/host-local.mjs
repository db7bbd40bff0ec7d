// host-local ADD+DEL: ours (script and standalone executable) vs the Go
// reference vs `node -e 0`, side by side in one run, at 0, 1,000 and 60,000 existing reservations in a /16.
// Each sample is one ADD followed by one DEL of a new container; the three
// contenders are interleaved so drift on a shared machine hits them alike.
import * as fs from 'node:fs';
import { join, resolve } from 'node:path';
import { tmpdir } from 'node:os';
import { fmt, median, peakRssKiB, ratio, table, timed } from './lib.mjs';

const OURS = resolve('bin/host-local');
const STANDALONE = resolve('dist/bin/host-local');
const GO = '/usr/lib/cni/host-local';
const SIZES = (process.env.BENCH_SIZES ?? '0,1000,60000').split(',').map(Number);
const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 21);

const root = fs.mkdtempSync(join(tmpdir(), 'bench-hl-'));
const conf = (dataDir) =>
  JSON.stringify({ cniVersion: '1.0.0', name: 'bench', type: 'host-local', ipam: { type: 'host-local', dataDir, ranges: [[{ subnet: '10.200.0.0/16' }]] } });
const env = (command, id) => ({ CNI_COMMAND: command, CNI_CONTAINERID: id, CNI_NETNS: '/var/run/netns/bench', CNI_IFNAME: 'eth0', CNI_PATH: '/nonexistent' });

/** Writes `n` reservations in the Go format, as a busy node would have them. */
function populate(dataDir, n) {
  const dir = join(dataDir, 'bench');
  fs.mkdirSync(dir, { recursive: true });
  let last = '';
  for (let i = 0; i < n; i++) {
    const ip = `10.200.${(i + 2) >> 8}.${(i + 2) & 255}`;
    fs.writeFileSync(join(dir, ip), `pre-${i}\r\neth0`);
    last = ip;
  }
  if (last) fs.writeFileSync(join(dir, 'last_reserved_ip.0'), last);
}

function addDel(bin, dataDir, id) {
  const c = conf(dataDir);
  return timed([bin], { env: env('ADD', id), input: c }) + timed([bin], { env: env('DEL', id), input: c });
}

try {
  console.log(`host-local ADD+DEL (one ADD and one DEL, each a fresh process), medians of ${ITERATIONS}`);
  const rows = [['reservations', 'ours', 'standalone', 'go', 'node -e 0', 'ours/go', '(ours-2*node)/go', '(standalone-2*node)/go', 'ours first call']];
  for (const n of SIZES) {
    const oursDir = join(root, `ours-${n}`);
    const goDir = join(root, `go-${n}`);
    const saDir = join(root, `sa-${n}`);
    populate(oursDir, n);
    populate(saDir, n);
    populate(goDir, n);
    // The first call of ours after someone else wrote the directory rebuilds the index: shown apart.
    const first = addDel(OURS, oursDir, 'warm-ours');
    addDel(GO, goDir, 'warm-go');
    addDel(STANDALONE, saDir, 'warm-sa');
    const samples = { ours: [], sa: [], go: [], floor: [] };
    for (let i = 0; i < ITERATIONS; i++) {
      samples.floor.push(timed(['node', '-e', '0']));
      samples.ours.push(addDel(OURS, oursDir, `b${i}`));
      samples.sa.push(addDel(STANDALONE, saDir, `b${i}`));
      samples.go.push(addDel(GO, goDir, `b${i}`));
    }
    const [o, s, g, f] = [median(samples.ours), median(samples.sa), median(samples.go), median(samples.floor)];
    rows.push([String(n), fmt(o), fmt(s), fmt(g), fmt(f), ratio(o, g), ratio(o - 2 * f, g), ratio(s - 2 * f, g), fmt(first)]);
  }
  table(rows);
  const dataDir = join(root, 'rss');
  const rss = [
    ['ours', peakRssKiB([OURS], { env: env('ADD', 'rss'), input: conf(dataDir) })],
    ['standalone', peakRssKiB([STANDALONE], { env: env('ADD', 'rss-sa'), input: conf(dataDir) })],
    ['go', peakRssKiB([GO], { env: env('ADD', 'rss-go'), input: conf(dataDir) })],
    ['node -e 0', peakRssKiB(['node', '-e', '0'])],
  ];
  if (rss.every(([, v]) => v !== undefined)) console.log(`peak RSS of one ADD: ${rss.map(([k, v]) => `${k} ${v} KiB`).join(', ')}`);
  else console.log('peak RSS: /usr/bin/time not installed (apt-get install time)');
} finally {
  fs.rmSync(root, { recursive: true, force: true });
}
