// The arm64 forms on this amd64 machine: the executables `make standalone
// ARCH=arm64` wrote (dist/arm64/bin) and the image `make image ARCH=arm64`
// wrote (dist/cni-ts-image-arm64.tar), run through qemu-user's binfmt_misc
// handler (scripts/test-prereqs.sh registers it) as an arm64 node would run
// them: each plugin's VERSION, host-local ADD/DEL, bridge ADD/DEL into a
// network namespace, kube-flannel's chain in one process, the daemon with
// its file store, and the image under podman (with the two images made into
// one multi-arch index, as docs/vxlan-flannel.md publishes them). The arm64
// package is checked in packaging.test.ts.
//
// Emulated, a Node start takes a second or so: what each step took is
// printed ("[arm64] ..."). No call may print V8's "Code cache data rejected"
// (the SEA blob's code cache must be the arm64 Node's own).
// Subnets: flannel network 10.95.0.0/16, bridge 10.95.200.0/24, underlay 192.168.95.0/24.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadAll } from 'js-yaml';
import { Lab } from './bridge-helpers';
import { ROOT, runProcess, sh, type PluginRun } from './helpers';
import { ELF_MACHINE, elfMachines, foreignElf, unpackImage } from './artifacts';
import { waitFor } from '../support/wait';

const PLUGINS = ['host-local', 'bridge', 'vxlan-flannel', 'flannel'];
const ARM64_BIN = join(ROOT, 'dist/arm64/bin');
const ARM64_IMAGE = join(ROOT, 'dist/cni-ts-image-arm64.tar');
const AMD64_IMAGE = join(ROOT, 'dist/cni-ts-image.tar');
const version = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).version as string;
const PATH = process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin';
const REJECTED = 'Code cache data rejected';

/* eslint-disable @typescript-eslint/no-explicit-any */
type Obj = Record<string, any>;
const manifest = loadAll(readFileSync(join(ROOT, 'deploy/kube-flannel.yml'), 'utf8')).filter(Boolean) as Obj[];
const podSpec = manifest.find((o) => o.kind === 'DaemonSet')!.spec.template.spec;

let lab: Lab;
let codeCache: string;
const timings: string[] = [];
beforeAll(() => {
  lab = new Lab('a64');
  codeCache = join(lab.dir, 'code-cache');
});
afterAll(() => {
  lab?.close();
  if (timings.length) process.stdout.write(`[arm64] under qemu-user:\n${timings.map((t) => `[arm64]   ${t}\n`).join('')}`);
});

/** Runs an arm64 executable in the lab's host namespace with exactly `env` (PATH and our code cache added); records what it took. */
async function arm64(step: string, argv: string[], env: Record<string, string> = {}, stdin = ''): Promise<PluginRun> {
  const t0 = Date.now();
  const full = { PATH, CNI_TS_CODE_CACHE_DIR: codeCache, ...env };
  const r = await runProcess(['nsenter', `--net=${lab.hostPath}`, '--', ...argv], full, stdin);
  timings.push(`${step}: ${Date.now() - t0} ms`);
  expect(r.stderr, step).not.toContain(REJECTED);
  return r;
}

/** (inode, mtime, size) of each file: what a rebuild of it would change. */
function snapshot(files: string[]): Record<string, string> {
  return Object.fromEntries(
    files.map((f) => {
      const s = statSync(f);
      return [f, `${s.ino}:${s.mtimeMs}:${s.size}`];
    }),
  );
}

/** The Makefile's key of the cached Debian layer: its scripts' hash. */
const baseKey = createHash('sha256')
  .update(Buffer.concat(['base.sh', 'trim.sh', 'iptables-wrapper'].map((f) => readFileSync(join(ROOT, 'packaging/image', f)))))
  .digest('hex')
  .slice(0, 16);

/** Each architecture's artifacts: its executables, its image and its cached Debian layer. */
function artifacts(arch: 'amd64' | 'arm64'): string[] {
  const bin = arch === 'amd64' ? join(ROOT, 'dist/bin') : ARM64_BIN;
  const image = arch === 'amd64' ? AMD64_IMAGE : ARM64_IMAGE;
  return [...PLUGINS.map((p) => join(bin, p)), image, join(ROOT, `.cache/image-base-${arch}-${baseKey}.tar`)];
}

describe('the arm64 executables', () => {
  it('a build for one architecture leaves the other\'s executables, image and Debian layer alone', () => {
    const make = (arch: string) => {
      const t0 = Date.now();
      sh(['make', '-s', '-C', ROOT, '-o', 'node_modules', 'image', `ARCH=${arch}`]);
      timings.push(`make image ARCH=${arch} (standalone, then the image on the cached Debian layer): ${Date.now() - t0} ms`);
    };
    const amd64 = snapshot(artifacts('amd64'));
    const arm64Before = snapshot(artifacts('arm64'));
    make('arm64');
    expect(snapshot(artifacts('amd64'))).toEqual(amd64);
    const arm64After = snapshot(artifacts('arm64'));
    expect(arm64After[join(ARM64_BIN, 'flannel')]).not.toBe(arm64Before[join(ARM64_BIN, 'flannel')]); // it did build
    make('amd64');
    expect(snapshot(artifacts('arm64'))).toEqual(arm64After);
    expect(snapshot(artifacts('amd64'))[join(ROOT, 'dist/bin/flannel')]).not.toBe(amd64[join(ROOT, 'dist/bin/flannel')]);
  }, 300_000);

  it('are one AArch64 file under four names in dist/arm64/bin; dist/bin stays x86-64', () => {
    expect(new Set(PLUGINS.map((p) => statSync(join(ARM64_BIN, p)).ino)).size).toBe(1);
    expect(foreignElf(elfMachines(ARM64_BIN), ELF_MACHINE.arm64)).toEqual([]);
    expect([...elfMachines(ARM64_BIN).keys()].sort()).toEqual([...PLUGINS].sort());
    expect(foreignElf(elfMachines(join(ROOT, 'dist/bin')), ELF_MACHINE.amd64)).toEqual([]);
  });

  it('each plugin answers VERSION', async () => {
    for (const p of PLUGINS) {
      const r = await arm64(`${p} VERSION`, [join(ARM64_BIN, p)], { CNI_COMMAND: 'VERSION' }, '{"cniVersion":"1.1.0"}');
      expect(r.code, `${p}: ${r.stdout}${r.stderr}`).toBe(0);
      expect(r.json).toMatchObject({ cniVersion: '1.1.0', supportedVersions: expect.arrayContaining(['0.3.1', '1.0.0', '1.1.0']) });
    }
  }, 120_000);

  it('host-local: ADD, then DEL, with the V8 code cache of an arm64 Node', async () => {
    const dataDir = join(lab.dir, 'hl');
    const ipam = { type: 'host-local', dataDir, ranges: [[{ subnet: '10.95.250.0/24' }]] };
    const conf = JSON.stringify({ cniVersion: '1.0.0', name: 'a64net', type: 'host-local', ipam });
    const env = (command: string) => ({ CNI_COMMAND: command, CNI_CONTAINERID: 'a64', CNI_NETNS: '/var/run/netns/x', CNI_IFNAME: 'eth0' });
    const file = join(ARM64_BIN, 'host-local');
    const add = await arm64('host-local ADD', [file], env('ADD'), conf);
    expect(add.code, add.stdout + add.stderr).toBe(0);
    expect(add.json.ips).toEqual([{ address: '10.95.250.2/24', gateway: '10.95.250.1' }]);
    expect(readFileSync(join(dataDir, 'a64net', '10.95.250.2'), 'utf8')).toBe('a64\r\neth0');
    const del = await arm64('host-local DEL', [file], env('DEL'), conf);
    expect(del.code, del.stdout + del.stderr).toBe(0);
    expect(existsSync(join(dataDir, 'a64net', '10.95.250.2'))).toBe(false);
    const cached = expect.stringMatching(/^host-local\.sea-[0-9a-f]{16}-v[\d.]+-arm64-ADD\.v8$/);
    expect(readdirSync(codeCache)).toEqual(expect.arrayContaining([cached]));
  }, 60_000);

  it('bridge: ADD into a network namespace (the gateway answers a ping), then DEL', async () => {
    const ctr = lab.netns('ctr');
    const conf = JSON.stringify({
      cniVersion: '1.0.0',
      name: 'a64br',
      type: 'bridge',
      bridge: 'a64br0',
      isGateway: true,
      ipam: { type: 'host-local', dataDir: join(lab.dir, 'br-ipam'), ranges: [[{ subnet: '10.95.200.0/24' }]] },
    });
    const env = (command: string) =>
      ({ CNI_COMMAND: command, CNI_CONTAINERID: 'a64br', CNI_NETNS: lab.path(ctr), CNI_IFNAME: 'eth0', CNI_PATH: ARM64_BIN });
    const add = await arm64('bridge ADD', [join(ARM64_BIN, 'bridge')], env('ADD'), conf);
    expect(add.code, add.stdout + add.stderr).toBe(0);
    expect(add.json.ips).toEqual([{ address: '10.95.200.2/24', gateway: '10.95.200.1', interface: 2 }]);
    expect(lab.link(ctr, 'eth0')?.addr_info.map((a) => `${a.local}/${a.prefixlen}`)).toContain('10.95.200.2/24');
    expect(lab.ping(ctr, '10.95.200.1')).toBe(true);
    const del = await arm64('bridge DEL', [join(ARM64_BIN, 'bridge')], env('DEL'), conf);
    expect(del.code, del.stdout + del.stderr).toBe(0);
    expect(lab.link(ctr, 'eth0')).toBeUndefined();
  }, 60_000);

  it('kube-flannel\'s chain (flannel -> bridge -> host-local) runs in one process: its delegates are files of this build that cannot run', async () => {
    const dir = join(lab.dir, 'chain');
    const fakes = join(dir, 'bin');
    mkdirSync(fakes, { recursive: true });
    // this build's stamp on a file no kernel runs: exec'd, the chain would fail
    const id = /\ncni-ts-build:([0-9a-f]{32})\n$/.exec(readFileSync(join(ARM64_BIN, 'bridge')).subarray(-64).toString('latin1'))?.[1];
    expect(id).toBeDefined();
    const fake = `\x7fELF${'\0'.repeat(200)}\ncni-ts-build:${id}\n`;
    for (const p of ['bridge', 'host-local']) writeFileSync(join(fakes, p), fake, { encoding: 'latin1', mode: 0o755 });
    const subnetEnv = 'FLANNEL_NETWORK=10.95.0.0/16\nFLANNEL_SUBNET=10.95.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n';
    writeFileSync(join(dir, 'subnet.env'), subnetEnv);
    const conf = JSON.stringify({
      cniVersion: '0.3.1',
      name: 'cbr0',
      type: 'flannel',
      subnetFile: join(dir, 'subnet.env'),
      dataDir: join(dir, 'flannel'),
      delegate: { hairpinMode: true, isDefaultGateway: true, bridge: 'a64fl0' },
      ipam: { dataDir: join(dir, 'ipam') },
    });
    const pod = lab.netns('pod');
    const env = (command: string) =>
      ({ CNI_COMMAND: command, CNI_CONTAINERID: 'a64pod', CNI_NETNS: lab.path(pod), CNI_IFNAME: 'eth0', CNI_PATH: fakes });
    const add = await arm64('flannel ADD (bridge and host-local in-process)', [join(ARM64_BIN, 'flannel')], env('ADD'), conf);
    expect(add.code, add.stdout + add.stderr).toBe(0);
    expect(add.json.ips).toMatchObject([{ address: '10.95.1.2/24', gateway: '10.95.1.1' }]);
    expect(lab.ping(pod, '10.95.1.1')).toBe(true);
    const del = await arm64('flannel DEL', [join(ARM64_BIN, 'flannel')], env('DEL'), conf);
    expect(del.code, del.stdout + del.stderr).toBe(0);
    expect(lab.link(pod, 'eth0')).toBeUndefined();
  }, 60_000);

  describe('vxlan-flannel daemon with the file store', () => {
    let daemon: ChildProcess | undefined;
    let log = '';
    afterAll(async () => {
      if (daemon && daemon.exitCode === null) {
        const exited = new Promise((r) => daemon!.once('exit', r));
        daemon.kill('SIGKILL');
        await exited;
      }
    });

    it('leases a subnet, writes subnet.env and makes its VTEP; SIGTERM stops it', async () => {
      const dir = join(lab.dir, 'daemon');
      mkdirSync(dir);
      const leaseDir = join(dir, 'leases');
      const subnetFile = join(dir, 'subnet.env');
      lab.in(lab.host, ['ip', 'link', 'add', 'a64u0', 'type', 'veth', 'peer', 'name', 'a64u1']);
      lab.in(lab.host, ['ip', 'addr', 'add', '192.168.95.1/24', 'dev', 'a64u0']);
      lab.in(lab.host, ['ip', 'link', 'set', 'a64u0', 'up']);
      lab.in(lab.host, ['ip', 'link', 'set', 'a64u1', 'up']);
      const flannel = join(ARM64_BIN, 'vxlan-flannel');
      const networkSet = [flannel, 'network', 'set', '--network', '10.95.0.0/16', '--lease-dir', leaseDir];
      const set = await arm64('vxlan-flannel network set', networkSet);
      expect(set.code, set.stderr).toBe(0);

      const t0 = Date.now();
      const argv = [flannel, 'daemon', '--iface', 'a64u0', '--lease-dir', leaseDir, '--subnet-file', subnetFile];
      daemon = spawn('nsenter', [`--net=${lab.hostPath}`, '--', ...argv], {
        env: { PATH, CNI_TS_CODE_CACHE_DIR: codeCache },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      daemon.stdout!.on('data', (b: Buffer) => (log += b));
      daemon.stderr!.on('data', (b: Buffer) => (log += b));
      await waitFor('the daemon to write subnet.env', () => existsSync(subnetFile), 60_000, 100).catch((e: Error) => {
        throw new Error(`${e.message}; the daemon said:\n${log}`);
      });
      timings.push(`vxlan-flannel daemon: start to subnet.env ${Date.now() - t0} ms`);
      const subnet = /^FLANNEL_SUBNET=10\.95\.(\d+)\.1\/24$/m.exec(readFileSync(subnetFile, 'utf8'))?.[1];
      expect(subnet, readFileSync(subnetFile, 'utf8')).toBeDefined();
      expect(readFileSync(subnetFile, 'utf8')).toMatch(/^FLANNEL_NETWORK=10\.95\.0\.0\/16\nFLANNEL_SUBNET=.*\nFLANNEL_MTU=1450\n/);
      const vtep = await waitFor('the VTEP flannel.1 with its address', () => {
        const l = lab.link(lab.host, 'flannel.1');
        return l?.addr_info.some((a) => a.local === `10.95.${subnet}.0`) ? l : undefined;
      }, 30_000, 100);
      expect(vtep.value!.linkinfo?.info_kind).toBe('vxlan');
      expect(vtep.value!.linkinfo?.info_data).toMatchObject({ id: 1, local: '192.168.95.1', port: 8472, learning: false });
      expect(vtep.value!.mtu).toBe(1450);

      const t1 = Date.now();
      const exited = new Promise<number | null>((r) => daemon!.once('exit', r));
      daemon.kill('SIGTERM');
      expect(await exited, log).toBe(0);
      timings.push(`vxlan-flannel daemon: SIGTERM to exit ${Date.now() - t1} ms`);
      expect(log).toMatch(/SIGTERM: stopping/);
      expect(log).not.toContain(REJECTED);
    }, 120_000);
  });
});

describe('the arm64 image', () => {
  let storage: string;
  /** podman with a storage of this file's own: loading the arm64 archive must not retag the machine's localhost/cni-ts. */
  const podman = (args: string[]) => {
    const store = ['--root', join(storage, 'root'), '--runroot', join(storage, 'run'), '--storage-driver', 'vfs'];
    return runProcess(['podman', ...store, '--cgroup-manager=cgroupfs', ...args], { PATH }, '');
  };
  const RUN = ['run', '--rm', '--network', 'none', '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=1024:1024'];
  const IMAGE = podSpec.containers[0].image as string;

  beforeAll(() => {
    if (!existsSync(ARM64_IMAGE)) throw new Error(`${ARM64_IMAGE} is missing: run \`make image ARCH=arm64\``);
    storage = join(lab.dir, 'podman');
    mkdirSync(storage);
  });
  afterAll(async () => {
    if (storage) await podman(['rm', '--all', '--force']);
  });

  it('holds AArch64 executables and libraries only (its Debian layer\'s too); its config says linux/arm64', () => {
    const t0 = Date.now();
    const image = unpackImage(ARM64_IMAGE, join(lab.dir, 'unpacked'));
    expect(image.config).toMatchObject({ architecture: 'arm64', os: 'linux', config: { Entrypoint: ['/opt/cni-ts/bin/vxlan-flannel'] } });
    const machines = elfMachines(image.root);
    timings.push(`unpacking the image and readelf of its ${machines.size} ELF files: ${Date.now() - t0} ms`);
    expect(machines.size).toBeGreaterThan(100);
    for (const f of ['opt/cni-ts/bin/vxlan-flannel', 'usr/sbin/xtables-nft-multi', 'usr/bin/ip', 'usr/bin/nsenter']) {
      expect(machines.has(f), f).toBe(true);
    }
    expect(foreignElf(machines, ELF_MACHINE.arm64)).toEqual([]);
  }, 120_000);

  it('runs under podman: the manifest\'s init container installs the plugin; the daemon\'s executable and the Debian layer\'s tools run', async () => {
    let t0 = Date.now();
    const loaded = await podman(['load', '--input', ARM64_IMAGE]);
    expect(loaded.code, loaded.stderr).toBe(0);
    expect(loaded.stdout + loaded.stderr).toContain(`Loaded image: ${IMAGE}`); // one name for both architectures
    timings.push(`podman load: ${Date.now() - t0} ms`);
    expect((await podman(['image', 'inspect', '--format', '{{.Os}}/{{.Architecture}}', IMAGE])).stdout.trim()).toBe('linux/arm64');

    // install-cni-plugin, with the manifest's command and args, into a node's /opt/cni/bin
    const init = podSpec.initContainers.find((c: Obj) => c.name === 'install-cni-plugin');
    const cniBin = join(lab.dir, 'node-cni-bin');
    mkdirSync(cniBin);
    t0 = Date.now();
    const volume = `${cniBin}:${init.volumeMounts[0].mountPath}`;
    const [entrypoint, ...command] = init.command as string[];
    const installed = await podman([...RUN, '--volume', volume, '--entrypoint', entrypoint, IMAGE, ...command, ...init.args]);
    timings.push(`podman run install-cni-plugin: ${Date.now() - t0} ms`);
    expect(installed.code, installed.stdout + installed.stderr).toBe(0);
    expect(installed.stderr).not.toContain(REJECTED);
    expect(readFileSync(join(cniBin, 'flannel')).equals(readFileSync(join(ARM64_BIN, 'flannel')))).toBe(true);

    t0 = Date.now();
    const script = 'uname -m && iptables --version && ip -V && exec /opt/cni-ts/bin/vxlan-flannel --version';
    const tools = await podman([...RUN, '--entrypoint', '/bin/sh', IMAGE, '-c', script]);
    timings.push(`podman run uname, iptables (the wrapper picks a variant), ip, vxlan-flannel --version: ${Date.now() - t0} ms`);
    expect(tools.code, tools.stdout + tools.stderr).toBe(0);
    expect(tools.stderr).not.toContain(REJECTED);
    const lines = tools.stdout.trim().split('\n');
    expect(lines[0]).toBe('aarch64');
    expect(lines[1]).toMatch(/^iptables v1\.8\.\d+ \((legacy|nf_tables)\)$/);
    expect(lines[2]).toMatch(/^ip utility, iproute2-/);
    expect(lines[3]).toBe(version);
  }, 180_000);

  it('makes one multi-arch image with amd64\'s, under the manifest\'s one name (podman manifest, as docs/vxlan-flannel.md publishes it)', async () => {
    const t0 = Date.now();
    const list = IMAGE.replace(/^localhost\//, 'registry.example.com/');
    expect((await podman(['manifest', 'create', list])).code).toBe(0);
    for (const tar of [AMD64_IMAGE, ARM64_IMAGE]) {
      const added = await podman(['manifest', 'add', list, `docker-archive:${tar}`]);
      expect(added.code, added.stderr).toBe(0);
    }
    // an OCI layout stands in for the registry: the same push, to a directory
    const layout = join(lab.dir, 'oci-layout');
    const pushed = await podman(['manifest', 'push', '--all', '--format', 'oci', list, `oci:${layout}`]);
    expect(pushed.code, pushed.stderr).toBe(0);
    timings.push(`podman manifest create, add both archives, push --all: ${Date.now() - t0} ms`);
    const blob = (digest: string) => JSON.parse(readFileSync(join(layout, 'blobs', ...digest.split(':')), 'utf8'));
    const [top] = JSON.parse(readFileSync(join(layout, 'index.json'), 'utf8')).manifests;
    expect(top.mediaType).toBe('application/vnd.oci.image.index.v1+json');
    const index = blob(top.digest);
    expect(index.manifests.map((m: Obj) => `${m.platform.os}/${m.platform.architecture}`).sort()).toEqual(['linux/amd64', 'linux/arm64']);
    for (const m of index.manifests) expect(blob(blob(m.digest).config.digest).architecture).toBe(m.platform.architecture);
  }, 120_000);
});
