// A node's pods starting at once, as after a reboot: N ADDs of bridge + host-local (one /24, each
// pod in its own network namespace) started together, then N DELs together, in a memory cgroup of
// their own, with the plugin's executable dropped from the page cache first (it is read from disk,
// as after a reboot). Wall time of each wave and the cgroup's peak memory; and the floor: 2N bare
// starts of the embedded Node at once, measured the same way. Shared by footprint.mjs.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const NODE_NS = 'cnibench-burst';
const POD_NS = (i) => `cnibench-burst-p${i}`;

/**
 * A memory cgroup of our own (cgroup v2's memory.peak, else v1's memory.max_usage_in_bytes): what
 * `sh` started in it (it moves itself in first) and its children use, page cache they bring in
 * included.
 */
function memoryCgroup(name) {
  const v2 = '/sys/fs/cgroup';
  const v1 = '/sys/fs/cgroup/memory';
  let dir;
  let peakFile;
  if (existsSync(join(v2, 'cgroup.controllers')) && readFileSync(join(v2, 'cgroup.subtree_control'), 'utf8').includes('memory')) {
    dir = join(v2, name);
    peakFile = 'memory.peak';
  } else if (existsSync(join(v1, 'memory.max_usage_in_bytes'))) {
    dir = join(v1, name);
    peakFile = 'memory.max_usage_in_bytes';
  } else throw new Error('burst: no memory cgroup (cgroup v2 with the memory controller enabled at the root, or v1\'s memory hierarchy)');
  rmCgroup(dir);
  mkdirSync(dir);
  return {
    procs: join(dir, 'cgroup.procs'),
    peakMiB: () => Number(readFileSync(join(dir, peakFile), 'utf8')) / 2 ** 20,
    remove: () => rmCgroup(dir),
  };
}

function rmCgroup(dir) {
  if (!existsSync(dir)) return;
  for (let i = 0; i < 100; i++) {
    try {
      rmdirSync(dir); // a cgroup goes once its processes have
      return;
    } catch {
      spawnSync('sleep', ['0.05']);
    }
  }
}

/**
 * Runs `lines` (shell commands, each put in the background) in the node's namespace and memory
 * cgroup `cg`: the wall time, and the CPU its processes used (the shell's children's, from /proc).
 */
function wave(lines, cg) {
  const script = `echo $$ > ${cg.procs}\n${lines.map((l) => `${l} &`).join('\n')}\nwait\ncat /proc/$$/stat\n`;
  const t0 = process.hrtime.bigint();
  const r = spawnSync('nsenter', [`--net=/run/netns/${NODE_NS}`, '--', 'sh', '-c', script], { encoding: 'utf8' });
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  if (r.status !== 0) throw new Error(`burst wave failed: ${r.stderr}`);
  const stat = r.stdout.trim().split('\n').pop();
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { ms, cpuMs: (Number(f[13]) + Number(f[14])) * 10 }; // cutime + cstime, in USER_HZ (100) ticks
}

const q = (s) => `'${s.replaceAll("'", "'\\''")}'`;

/**
 * One burst of `n` pods with `bridge` (a plugin executable; `cniPath` finds its host-local): ADDs
 * together, then DELs together. Checks every ADD got an address (all distinct) and that nothing is
 * left after the DELs. Returns each wave's wall time, the peak of both, and the CPU they used.
 */
export function podBurst({ bridge, cniPath, n, env = {}, label }) {
  const dir = mkdtempSync(join(tmpdir(), 'cnibench-burst-'));
  const cg = memoryCgroup(`cnibench-burst-${process.pid}`);
  try {
    setUp(n);
    const conf = join(dir, 'conf.json');
    const dataDir = join(dir, 'ipam');
    writeFileSync(conf, JSON.stringify({ cniVersion: '1.0.0', name: 'burst', type: 'bridge', bridge: 'cnib0', isGateway: true, ipMasq: false, ipam: { type: 'host-local', ranges: [[{ subnet: '10.199.0.0/24' }]], dataDir } }));
    const vars = Object.entries({ PATH: process.env.PATH, CNI_IFNAME: 'eth0', CNI_PATH: cniPath, ...env }).map(([k, v]) => `${k}=${q(v)}`).join(' ');
    const call = (cmd, i) => `env -i ${vars} CNI_COMMAND=${cmd} CNI_CONTAINERID=burst${i} CNI_NETNS=/run/netns/${POD_NS(i)} ${q(bridge)} < ${q(conf)} > ${q(join(dir, `${cmd}.${i}`))} 2>&1`;
    // the executable read from disk, as after a reboot (its pages are then charged to this cgroup)
    spawnSync('dd', [`if=${bridge}`, 'iflag=nocache', 'count=0', 'status=none']);
    const ids = Array.from({ length: n }, (_, i) => i);
    const add = wave(ids.map((i) => call('ADD', i)), cg);
    const ips = ids.map((i) => {
      const out = readFileSync(join(dir, `ADD.${i}`), 'utf8');
      const ip = (() => {
        try {
          return JSON.parse(out).ips?.[0]?.address;
        } catch {
          return undefined;
        }
      })();
      if (!ip) throw new Error(`${label}: ADD ${i} failed: ${out}`);
      return ip;
    });
    if (new Set(ips).size !== n) throw new Error(`${label}: ${n} ADDs got ${new Set(ips).size} distinct addresses`);
    const del = wave(ids.map((i) => call('DEL', i)), cg);
    for (const i of ids) {
      const out = readFileSync(join(dir, `DEL.${i}`), 'utf8').trim();
      if (out) throw new Error(`${label}: DEL ${i} said: ${out}`);
    }
    const left = leftovers(dataDir, n);
    if (left.length) throw new Error(`${label}: left after the DELs: ${left.join('; ')}`);
    return { add: add.ms, del: del.ms, wall: add.ms + del.ms, cpuMs: add.cpuMs + del.cpuMs, peakMiB: cg.peakMiB() };
  } finally {
    tearDown(n);
    cg.remove();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The floor: `2n` bare starts of `node` (the embedded Node) in the shape of a burst, n at once and
 * then n at once, in the node's namespace and a cgroup of their own, measured the same way.
 */
export function nodeFloor({ node, n }) {
  const cg = memoryCgroup(`cnibench-burst-${process.pid}`);
  try {
    execFileSync('ip', ['netns', 'add', NODE_NS]);
    spawnSync('dd', [`if=${node}`, 'iflag=nocache', 'count=0', 'status=none']);
    const starts = Array.from({ length: n }, () => `env -i PATH=${q(process.env.PATH)} ${q(node)} -e 0`);
    const [a, b] = [wave(starts, cg), wave(starts, cg)];
    return { wall: a.ms + b.ms, cpuMs: a.cpuMs + b.cpuMs, peakMiB: cg.peakMiB() };
  } finally {
    spawnSync('ip', ['netns', 'del', NODE_NS]);
    cg.remove();
  }
}

function setUp(n) {
  tearDown(n);
  execFileSync('ip', ['netns', 'add', NODE_NS]);
  execFileSync('ip', ['-n', NODE_NS, 'link', 'set', 'lo', 'up']);
  const batch = Array.from({ length: n }, (_, i) => `netns add ${POD_NS(i)}`).join('\n');
  execFileSync('ip', ['-batch', '-'], { input: batch });
}

function tearDown(n) {
  for (let i = 0; i < n; i++) spawnSync('ip', ['netns', 'del', POD_NS(i)], { stdio: 'ignore' });
  spawnSync('ip', ['netns', 'del', NODE_NS], { stdio: 'ignore' });
}

/** What the DELs should have removed: reservations, veths on the bridge, the pods' eth0. */
function leftovers(dataDir, n) {
  const left = [];
  const net = join(dataDir, 'burst');
  if (existsSync(net)) left.push(...readdirSync(net).filter((f) => /^\d+\.\d+\.\d+\.\d+$/.test(f)).map((f) => `reservation ${f}`));
  const ports = JSON.parse(execFileSync('ip', ['-n', NODE_NS, '-j', 'link', 'show', 'master', 'cnib0'], { encoding: 'utf8' }) || '[]');
  left.push(...ports.map((p) => `port ${p.ifname}`));
  for (let i = 0; i < n; i++) {
    const links = JSON.parse(execFileSync('ip', ['-n', POD_NS(i), '-j', 'link', 'show'], { encoding: 'utf8' }) || '[]');
    if (links.some((l) => l.ifname === 'eth0')) left.push(`eth0 in pod ${i}`);
  }
  return left;
}
