// Bench: the pod chain of a kube-flannel cluster (issue 18), as a kubelet's
// runtime runs it: kube-flannel's cni-conf.json (flannel delegating to bridge,
// which delegates to host-local; then the Go portmap) through libcni (the
// project's own driver, test/libcni-driver, run as cnitool is), one container
// ADD then DEL, every contender interleaved sample by sample in one run:
//
//   ours, standalone hard-linked   dist/bin installed as `make install-standalone` does (install(1) copies
//                                  the file once, the other names are hard links). Not dist/bin itself:
//                                  the build's freshly written file maps up to ~18 MB more at start
//                                  (file-backed pages mapped in larger pieces; no difference in time)
//   ours, standalone copied        separate copies of dist/bin/{flannel,bridge,host-local}
//   ours, scripts                  bin/
//   ours, exec path                the hard links with CNI_TS_DELEGATE_EXEC=1 (one Node process per plugin)
//   Go bridge + host-local         the delegate config our flannel renders, run by the Go plugins: a lower
//                                  bound for Go's chain, always available from Debian's packages
//   Go chain                       flannel's own Go plugin + Go bridge + host-local, when
//                                  GO_FLANNEL=/path/to/flannel is given
//   2 x node -e 0                  the start-up floor of two Node processes
//
//   node test/bench/chain.mjs       (root; BENCH_ITER=N to change the count)
//
// Then the peak RSS of one ADD and one DEL of our flannel plugin (the whole
// chain in its one process) beside `node -e 0`'s.
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, linkSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fmt, median, peakRssKiB, ratio, table } from './lib.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');
const GO = '/usr/lib/cni';
const HOST = 'cnibench-ch-host';
const CTR = 'cnibench-ch-ctr';
const NETWORK = 'cbr0';

/** kube-flannel's cni-conf.json (v0.28), with its files in the run's directory and a bridge of its own. */
function flannelConflist(dir, k, bridge) {
  return {
    cniVersion: '0.3.1',
    name: NETWORK,
    plugins: [
      {
        type: 'flannel',
        subnetFile: join(dir, 'subnet.env'),
        dataDir: join(dir, 'flannel'),
        delegate: { hairpinMode: true, isDefaultGateway: true, bridge },
        ipam: { dataDir: join(dir, 'ipam') },
      },
      { type: 'portmap', capabilities: { portMappings: true } },
    ],
  };
}

function writeContender(state, c, k) {
  const dir = join(state, c.key);
  mkdirSync(join(dir, 'net.d'), { recursive: true });
  // FLANNEL_IPMASQ=true as flanneld --ip-masq writes it: the delegate then does no masquerading.
  writeFileSync(join(dir, 'subnet.env'), `FLANNEL_NETWORK=10.90.0.0/16\nFLANNEL_SUBNET=10.90.${k + 1}.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n`);
  writeFileSync(join(dir, 'net.d', `10-${NETWORK}.conflist`), JSON.stringify(c.conflist ?? flannelConflist(dir, k, `cbch${k}`)));
  return { ...c, dir, netconf: join(dir, 'net.d') };
}

function inner() {
  const { iterations, contenders, driver, codeCache } = JSON.parse(process.argv[3]);
  const netns = `/run/netns/${CTR}`;
  const base = { PATH: process.env.PATH, CNI_TS_CODE_CACHE_DIR: codeCache };
  const run = (c, cmd, id) => {
    const env = { ...base, NETCONFPATH: c.netconf, CNI_PATH: c.path, ...c.env };
    const t0 = process.hrtime.bigint();
    const r = spawnSync(driver, [cmd, NETWORK, netns, id], { env, encoding: 'utf8' });
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (r.status !== 0) throw new Error(`${c.name} ${cmd} failed: ${r.stdout}${r.stderr}`);
    return ms;
  };
  const times = Object.fromEntries([...contenders.map((c) => [c.name, { add: [], del: [] }]), ['2 x node -e 0', { add: [], del: [] }]]);
  const warmup = 3;
  for (let i = 0; i < iterations + warmup; i++) {
    for (const c of contenders) {
      const id = `chain${i}`;
      const [a, d] = [run(c, 'add', id), run(c, 'del', id)];
      if (i >= warmup) times[c.name].add.push(a), times[c.name].del.push(d);
    }
    const t0 = process.hrtime.bigint();
    spawnSync('node', ['-e', '0'], { env: base });
    spawnSync('node', ['-e', '0'], { env: base });
    if (i >= warmup) {
      const both = Number(process.hrtime.bigint() - t0) / 1e6;
      times['2 x node -e 0'].add.push(both / 2), times['2 x node -e 0'].del.push(both / 2);
    }
  }
  // Peak RSS of our flannel plugin alone (the chain in one process), ADD then DEL, and of `node -e 0`.
  const rss = {};
  for (const c of contenders.filter((x) => x.rss)) {
    const conf = JSON.parse(readFileSync(join(c.netconf, `10-${NETWORK}.conflist`), 'utf8'));
    const plugin = { cniVersion: conf.cniVersion, name: NETWORK, ...conf.plugins[0] };
    const env = { ...base, CNI_CONTAINERID: 'rss', CNI_NETNS: netns, CNI_IFNAME: 'eth0', CNI_PATH: c.path, ...c.env };
    const input = JSON.stringify(plugin);
    rss[c.name] = {
      add: peakRssKiB([join(c.path.split(':')[0], 'flannel')], { env: { ...env, CNI_COMMAND: 'ADD' }, input }),
      del: peakRssKiB([join(c.path.split(':')[0], 'flannel')], { env: { ...env, CNI_COMMAND: 'DEL' }, input }),
    };
  }
  rss['node -e 0'] = { add: peakRssKiB(['node', '-e', '0'], { env: base }) };
  process.stdout.write(JSON.stringify({ times, rss }));
}

/** Go's delegate for the lower bound: the config our flannel saved for a container, for the Go bridge, in a conflist with portmap. */
function renderedConflist(ours, dir, k) {
  const saved = JSON.parse(readFileSync(join(ours.dir, 'flannel', `${NETWORK}:render:eth0`), 'utf8'));
  saved.bridge = `cbch${k}`;
  saved.ipam.dataDir = join(dir, 'ipam');
  saved.ipam.ranges = [[{ subnet: `10.90.${k + 1}.0/24` }]]; // each contender its own subnet (and bridge)
  const { cniVersion, name, ...bridge } = saved;
  return { cniVersion, name, plugins: [bridge, { type: 'portmap', capabilities: { portMappings: true } }] };
}

function outer() {
  if (process.getuid?.() !== 0) {
    console.error('chain bench: needs root (network namespaces)');
    process.exit(1);
  }
  const iterations = Number(process.env.BENCH_ITER ?? 20);
  const goFlannel = process.env.GO_FLANNEL;
  const state = mkdtempSync(join(tmpdir(), 'cnibench-ch-'));
  const sh = (...argv) => execFileSync(argv[0], argv.slice(1), { stdio: 'pipe' });
  const inHost = (argv, opts = {}) => spawnSync('ip', ['netns', 'exec', HOST, ...argv], { encoding: 'utf8', maxBuffer: 64 << 20, ...opts });
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
  let out;
  try {
    const driver = join(state, 'libcni-driver');
    execFileSync('go', ['build', '-o', driver, '.'], {
      cwd: join(root, 'test/libcni-driver'),
      env: { ...process.env, GO111MODULE: 'off', GOPATH: '/usr/share/gocode', GOCACHE: join(state, 'gocache'), GOFLAGS: '' },
      stdio: 'pipe',
    });
    const copies = join(state, 'copies');
    mkdirSync(copies);
    for (const p of ['flannel', 'bridge', 'host-local']) copyFileSync(join(root, 'dist/bin', p), join(copies, p));
    // As `make install-standalone`: one copy by install(1), the other names hard links to it.
    const standalone = join(state, 'installed');
    mkdirSync(standalone);
    sh('install', '-m', '0755', join(root, 'dist/bin/host-local'), standalone);
    for (const p of ['bridge', 'flannel']) linkSync(join(standalone, 'host-local'), join(standalone, p));
    let contenders = [
      { key: 'hl', name: 'ours, standalone hard-linked', path: `${standalone}:${GO}`, env: {}, rss: true },
      { key: 'cp', name: 'ours, standalone copied', path: `${copies}:${GO}`, env: {}, rss: true },
      { key: 'sc', name: 'ours, scripts', path: `${join(root, 'bin')}:${GO}`, env: {}, rss: true },
      { key: 'ex', name: 'ours, exec path (standalone)', path: `${standalone}:${GO}`, env: { CNI_TS_DELEGATE_EXEC: '1' } },
    ].map((c, k) => writeContender(state, c, k));
    for (const ns of [HOST, CTR]) {
      sh('ip', 'netns', 'add', ns);
      sh('ip', '-n', ns, 'link', 'set', 'lo', 'up');
    }
    // One ADD through our chain renders the delegate config Go's bridge gets.
    const ours = contenders[0];
    const render = inHost([join(standalone, 'flannel')], {
      env: { PATH: process.env.PATH, CNI_COMMAND: 'ADD', CNI_CONTAINERID: 'render', CNI_NETNS: `/run/netns/${CTR}`, CNI_IFNAME: 'eth0', CNI_PATH: ours.path },
      input: JSON.stringify({ cniVersion: '0.3.1', name: NETWORK, ...flannelConflist(ours.dir, 0, 'cbch0').plugins[0] }),
    });
    if (render.status !== 0) throw new Error(`rendering the delegate config failed: ${render.stdout}${render.stderr}`);
    const k = contenders.length;
    const goDir = join(state, 'gb');
    const rendered = renderedConflist(ours, goDir, k);
    inHost([join(standalone, 'flannel')], {
      env: { PATH: process.env.PATH, CNI_COMMAND: 'DEL', CNI_CONTAINERID: 'render', CNI_NETNS: `/run/netns/${CTR}`, CNI_IFNAME: 'eth0', CNI_PATH: ours.path },
      input: JSON.stringify({ cniVersion: '0.3.1', name: NETWORK, ...flannelConflist(ours.dir, 0, 'cbch0').plugins[0] }),
    });
    contenders.push(writeContender(state, { key: 'gb', name: 'Go bridge + host-local (rendered)', path: GO, env: {}, conflist: rendered }, k));
    if (goFlannel) {
      const bin = join(state, 'goflannel-bin');
      mkdirSync(bin);
      symlinkSync(resolve(goFlannel), join(bin, 'flannel'));
      contenders.push(writeContender(state, { key: 'gf', name: 'Go chain (flannel + bridge + host-local)', path: `${bin}:${GO}`, env: {} }, k + 1));
    }
    const r = inHost([process.execPath, fileURLToPath(import.meta.url), '--inner', JSON.stringify({ iterations, contenders, driver, codeCache: join(state, 'code-cache') })]);
    if (r.status !== 0) throw new Error(`bench loop failed: ${r.stderr}`);
    out = JSON.parse(r.stdout);
  } finally {
    removeNamespaces();
    rmSync(state, { recursive: true, force: true });
  }

  const { times, rss } = out;
  const m = Object.fromEntries(
    Object.entries(times).map(([k, t]) => [k, { add: median(t.add), del: median(t.del), both: median(t.add.map((a, i) => a + t.del[i])) }]),
  );
  const go = m['Go chain (flannel + bridge + host-local)'] ?? m['Go bridge + host-local (rendered)'];
  const goName = m['Go chain (flannel + bridge + host-local)'] ? 'the Go chain' : 'Go bridge + host-local (GO_FLANNEL=/path/to/flannel adds the full Go chain)';
  console.log(`pod chain (kube-flannel): flannel -> bridge -> host-local, then Go portmap, through libcni; one container ADD then DEL, ${iterations} interleaved iterations (medians)`);
  const rows = [['', 'ADD', 'DEL', 'ADD+DEL', `vs Go`, 'vs 2 x node -e 0']];
  const floor = m['2 x node -e 0'].both;
  for (const [k, v] of Object.entries(m)) rows.push([k, fmt(v.add), fmt(v.del), fmt(v.both), ratio(v.both, go.both), ratio(v.both, floor)]);
  table(rows);
  console.log(`"vs Go" is against ${goName}; goal: ours <= 2.00x`);
  const nodeRss = rss['node -e 0'].add;
  console.log(
    `peak RSS of our flannel plugin (the whole chain in one process): ` +
      Object.entries(rss)
        .filter(([k]) => k !== 'node -e 0')
        .map(([k, v]) => `${k}: ADD ${v.add ?? '?'} KiB, DEL ${v.del ?? '?'} KiB (node -e 0 + ${(((v.add ?? 0) - nodeRss) / 1024).toFixed(1)} MB)`)
        .join('; ') +
      `; node -e 0: ${nodeRss ?? '?'} KiB; goal: <= node -e 0 + 15 MB`,
  );
}

if (process.argv[2] === '--inner') inner();
else outer();
