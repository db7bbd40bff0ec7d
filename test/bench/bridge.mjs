// Bench: bridge + host-local ADD and DEL of one container, ours (script and
// standalone executable) vs the Go reference plugins vs `node -e 0`, interleaved in one run so machine noise
// hits all alike. Everything runs inside a throwaway "host" namespace (the
// measuring loop re-executes itself there), so the numbers hold no nsenter.
//
//   node test/bench/bridge.mjs            (root; BENCH_ITER=N to change the count)
//
// Reported per config: medians of ADD, DEL and ADD+DEL for ours (host-local
// in-process), ours with host-local exec'd (CNI_TS_IPAM_EXEC=1), the standalone
// executable, Go, and node -e 0; then the target: ours minus one Node start
// per call, against Go; and the peak RSS of one ADD of each.
import { spawnSync, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fmt, median, peakRssKiB, ratio, table } from './lib.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');
const OURS = join(root, 'bin');
const STANDALONE = join(root, 'dist/bin');
const GO = '/usr/lib/cni';
const HOST = 'cnibench-br-host';
const CTR = 'cnibench-br-ctr';

const CONFIGS = [
  { label: 'gateway (isGateway, isDefaultGateway, IPv4)', extra: { isGateway: true, isDefaultGateway: true }, ranges: [[{ subnet: '10.77.250.0/24' }]] },
  { label: 'gateway + ipMasq, dual-stack', extra: { isGateway: true, isDefaultGateway: true, ipMasq: true }, ranges: [[{ subnet: '10.77.251.0/24' }], [{ subnet: 'fd77:251::/64' }]] },
];

function inner() {
  const { iterations, dataDir, codeCache } = JSON.parse(process.argv[3]);
  const netns = `/run/netns/${CTR}`;
  // Every contender's environment: PATH, and our code cache in a directory of this run's own (other
  // builds on the machine evict each other's caches in the shared default); the others ignore it.
  const clean = { PATH: process.env.PATH, CNI_TS_CODE_CACHE_DIR: codeCache };
  const out = [];
  for (const [ci, c] of CONFIGS.entries()) {
    const conf = (who) =>
      JSON.stringify({
        cniVersion: '1.0.0',
        name: `bench${ci}-${who}`,
        type: 'bridge',
        bridge: `bb${ci}${who}`,
        ...c.extra,
        ipam: { type: 'host-local', ranges: c.ranges, dataDir },
      });
    const variants = [
      { name: 'ours', file: join(OURS, 'bridge'), path: OURS, conf: conf('o'), env: {} },
      { name: 'ours, host-local exec', file: join(OURS, 'bridge'), path: OURS, conf: conf('x'), env: { CNI_TS_IPAM_EXEC: '1' } },
      { name: 'standalone', file: join(STANDALONE, 'bridge'), path: STANDALONE, conf: conf('s'), env: {} },
      { name: 'go', file: join(GO, 'bridge'), path: GO, conf: conf('g'), env: {} },
    ];
    const times = Object.fromEntries([...variants.map((v) => [v.name, { add: [], del: [] }]), ['node -e 0', { add: [], del: [] }]]);
    const warmup = 3;
    for (let i = 0; i < iterations + warmup; i++) {
      for (const v of variants) {
        const env = { ...clean, CNI_CONTAINERID: `bench${i}`, CNI_NETNS: netns, CNI_IFNAME: 'eth0', CNI_PATH: v.path, ...v.env };
        for (const cmd of ['ADD', 'DEL']) {
          const t0 = process.hrtime.bigint();
          const r = spawnSync(v.file, [], { env: { ...env, CNI_COMMAND: cmd }, input: v.conf, encoding: 'utf8' });
          const ms = Number(process.hrtime.bigint() - t0) / 1e6;
          if (r.status !== 0) throw new Error(`${v.name} ${cmd} failed: ${r.stdout}${r.stderr}`);
          if (i >= warmup) times[v.name][cmd === 'ADD' ? 'add' : 'del'].push(ms);
        }
      }
      for (const slot of ['add', 'del']) {
        const t0 = process.hrtime.bigint();
        spawnSync('node', ['-e', '0'], { env: clean }); // the plugins' clean environment
        if (i >= warmup) times['node -e 0'][slot].push(Number(process.hrtime.bigint() - t0) / 1e6);
      }
    }
    const rss = {};
    for (const v of variants) {
      const env = { ...clean, CNI_CONTAINERID: 'rss', CNI_NETNS: netns, CNI_IFNAME: 'eth0', CNI_PATH: v.path, ...v.env };
      rss[v.name] = peakRssKiB([v.file], { env: { ...env, CNI_COMMAND: 'ADD' }, input: v.conf });
      spawnSync(v.file, [], { env: { ...env, CNI_COMMAND: 'DEL' }, input: v.conf });
    }
    rss['node -e 0'] = peakRssKiB(['node', '-e', '0'], { env: clean });
    out.push({ label: c.label, times, rss });
  }
  process.stdout.write(JSON.stringify(out));
}

function outer() {
  if (process.getuid?.() !== 0) {
    console.error('bridge bench: needs root (network namespaces)');
    process.exit(1);
  }
  const iterations = Number(process.env.BENCH_ITER ?? 30);
  const state = mkdtempSync(join(tmpdir(), 'cnibench-br-'));
  const [dataDir, codeCache] = [join(state, 'ipam'), join(state, 'code-cache')];
  const sh = (...argv) => execFileSync(argv[0], argv.slice(1), { stdio: 'pipe' });
  const removeNamespaces = () => {
    for (const ns of [HOST, CTR]) {
      try {
        sh('ip', 'netns', 'del', ns);
      } catch {
        // not there
      }
    }
  };
  removeNamespaces();
  let runs;
  try {
    for (const ns of [HOST, CTR]) {
      sh('ip', 'netns', 'add', ns);
      sh('ip', '-n', ns, 'link', 'set', 'lo', 'up');
    }
    const r = spawnSync('ip', ['netns', 'exec', HOST, process.execPath, fileURLToPath(import.meta.url), '--inner', JSON.stringify({ iterations, dataDir, codeCache })], {
      encoding: 'utf8',
      maxBuffer: 64 << 20,
    });
    if (r.status !== 0) throw new Error(`bench loop failed: ${r.stderr}`);
    runs = JSON.parse(r.stdout);
  } finally {
    removeNamespaces();
    rmSync(state, { recursive: true, force: true });
  }

  console.log(`bridge + host-local, one container ADD then DEL, ${iterations} interleaved iterations (medians)`);
  for (const { label, times, rss } of runs) {
    const m = Object.fromEntries(
      Object.entries(times).map(([k, t]) => [k, { add: median(t.add), del: median(t.del), both: median(t.add.map((a, i) => a + t.del[i])) }]),
    );
    const node = m['node -e 0'].add;
    const go = m.go;
    console.log(`\n${label}`);
    const rows = [['', 'ADD', 'DEL', 'ADD+DEL', 'vs Go', 'vs node -e 0']];
    for (const [k, v] of Object.entries(m)) {
      const both = k === 'node -e 0' ? node : v.both;
      rows.push([k, fmt(v.add), fmt(v.del), fmt(both), ratio(both, go.both), ratio(both, k === 'node -e 0' ? node : 2 * node)]);
    }
    table(rows);
    const net = (x) => x - node;
    for (const who of ['ours', 'standalone']) {
      const o = m[who];
      console.log(
        `target (${who} - one node start per call <= Go): ADD ${fmt(net(o.add))} vs ${fmt(go.add)} (${ratio(net(o.add), go.add)}), ` +
          `DEL ${fmt(net(o.del))} vs ${fmt(go.del)} (${ratio(net(o.del), go.del)}), ` +
          `ADD+DEL ${fmt(o.both - 2 * node)} vs ${fmt(go.both)} (${ratio(o.both - 2 * node, go.both)})`,
      );
    }
    const [o, x] = [m.ours, m['ours, host-local exec']];
    console.log(`peak RSS of one ADD: ${Object.entries(rss).map(([k, v]) => `${k} ${v ?? '?'} KiB`).join(', ')}`);
    console.log(`host-local in-process saves ${fmt(x.both - o.both)} per ADD+DEL (exec: ${fmt(x.both)}, in-process: ${fmt(o.both)})`);
  }
}

if (process.argv[2] === '--inner') inner();
else outer();
