// The standalone executables (make standalone -> dist/bin) on a host view
// where Node.js cannot run (no-node.ts): one file under four names, each
// running its plugin; host-local ADD/CHECK/DEL as a runtime calls it; the
// vxlan-flannel daemon from the standalone file with its embedded store, and
// kube-flannel's `"type": "flannel"` network through libcni (delegating to the
// standalone bridge and host-local). The libcni chain of bridge, tuning and
// portmap runs with dist/bin in bridge-interop.test.ts.
// Subnets: flannel network 10.93.0.0/16, underlay 192.168.93.0/24.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, linkSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Lab } from './bridge-helpers';
import { OUR_BIN, ROOT, memoryHolds, runProcess, type PluginRun } from './helpers';
import { STANDALONE_BIN, withoutNode } from './no-node';
import { waitFor } from '../support/wait';

const PLUGINS = ['host-local', 'bridge', 'vxlan-flannel', 'flannel'];
const version = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).version as string;
const PATH = process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin';

let lab: Lab;
beforeAll(() => {
  lab = new Lab('sa');
});
afterAll(() => lab?.close());

/** Runs argv where Node.js cannot run, with exactly `env` (PATH added) and `stdin`. */
function noNode(argv: string[], env: Record<string, string> = {}, stdin = ''): Promise<PluginRun> {
  return runProcess(withoutNode(argv), { PATH, ...env }, stdin);
}

describe('one executable, four names, no Node.js', () => {
  it('is one file hard-linked under every plugin name', () => {
    expect(new Set(PLUGINS.map((p) => statSync(join(STANDALONE_BIN, p)).ino)).size).toBe(1);
  });

  it('runs where the scripts cannot (node is not there)', async () => {
    const script = await noNode([join(OUR_BIN, 'host-local'), '--version']);
    expect(script.code).not.toBe(0);
    expect(script.stderr).toMatch(/node'?: Permission denied/);
    for (const p of PLUGINS) {
      const r = await noNode([join(STANDALONE_BIN, p), '--version']);
      expect(r.code, `${p}: ${r.stderr}`).toBe(0);
      expect(r.stdout.trim()).toBe(version);
    }
  });

  it('each name is its own plugin (flannel is vxlan-flannel)', async () => {
    const help = async (p: string) => (await noNode([join(STANDALONE_BIN, p), '--help'])).stdout.split('\n')[0];
    expect(await help('host-local')).toMatch(/^Usage: host-local /);
    expect(await help('bridge')).toMatch(/^Usage: bridge /);
    expect(await help('vxlan-flannel')).toMatch(/^Usage: vxlan-flannel /);
    expect(await help('flannel')).toMatch(/^Usage: vxlan-flannel /);
  });

  it('under a name it does not know, it says which names it has (as a CNI error for a runtime)', async () => {
    const odd = join(lab.dir, 'cni-plugin');
    linkSync(join(STANDALONE_BIN, 'bridge'), odd);
    const r = await noNode([odd], { CNI_COMMAND: 'VERSION' });
    expect(r.code).toBe(1);
    expect(r.json).toMatchObject({ code: 999, msg: expect.stringContaining('host-local, bridge, vxlan-flannel, flannel') });
    expect(r.stderr).toContain('must be named (or linked as) one of');
  });
});

describe('host-local, standalone, as a runtime calls it', () => {
  it('ADD, CHECK, DEL and ls', async () => {
    const dataDir = join(lab.dir, 'hl');
    const conf = { cniVersion: '1.0.0', name: 'sanet', type: 'host-local', ipam: { type: 'host-local', dataDir, ranges: [[{ subnet: '10.93.250.0/24' }]] } };
    const file = join(STANDALONE_BIN, 'host-local');
    const env = (command: string) => ({ CNI_COMMAND: command, CNI_CONTAINERID: 'sa1', CNI_NETNS: '/var/run/netns/unused', CNI_IFNAME: 'eth0', CNI_PATH: STANDALONE_BIN });
    const add = await noNode([file], env('ADD'), JSON.stringify(conf));
    expect(add.code, add.stdout + add.stderr).toBe(0);
    expect(add.json.ips).toEqual([{ address: '10.93.250.2/24', gateway: '10.93.250.1' }]);
    expect(readFileSync(join(dataDir, 'sanet', '10.93.250.2'), 'utf8')).toBe('sa1\r\neth0');
    const check = await noNode([file], env('CHECK'), JSON.stringify({ ...conf, prevResult: add.json }));
    expect(check.code, check.stdout).toBe(0);
    const ls = await noNode([file, 'ls', '--data-dir', dataDir, '--json'], { CNI_PATH: STANDALONE_BIN }); // a CNI_PATH left in the shell
    expect(ls.code, ls.stderr).toBe(0);
    expect(JSON.parse(ls.stdout)).toMatchObject([{ network: 'sanet', ip: '10.93.250.2', containerID: 'sa1', ifname: 'eth0' }]);
    const del = await noNode([file], env('DEL'), JSON.stringify(conf));
    expect(del.code, del.stdout).toBe(0);
    expect(existsSync(join(dataDir, 'sanet', '10.93.250.2'))).toBe(false);
  });
});

describe('the code cache of the standalone executable', () => {
  it('is its own (never confused with the scripts\'), written by the first successful call and used by the next', async () => {
    const cacheDir = join(lab.dir, 'code-cache');
    const conf = JSON.stringify({ cniVersion: '1.0.0', name: 'ccsa', type: 'host-local', ipam: { type: 'host-local', dataDir: join(lab.dir, 'cc-data'), ranges: [[{ subnet: '10.93.251.0/24' }]] } });
    const env = (id: string) => ({ CNI_COMMAND: 'ADD', CNI_CONTAINERID: id, CNI_NETNS: '/var/run/netns/unused', CNI_IFNAME: 'eth0', CNI_TS_CODE_CACHE_DIR: cacheDir });
    expect((await noNode([join(STANDALONE_BIN, 'host-local')], env('a'), conf)).code).toBe(0);
    const files = readdirSync(cacheDir);
    expect(files).toHaveLength(1);
    expect(files[0]).toMatch(/^host-local\.sea-[0-9a-f]{16}-v\d+\.\d+\.\d+-x64-ADD\.v8$/);
    const written = statSync(join(cacheDir, files[0])).mtimeMs;
    expect((await noNode([join(STANDALONE_BIN, 'host-local')], env('b'), conf)).json.ips[0].address).toBe('10.93.251.3/24');
    expect(statSync(join(cacheDir, files[0])).mtimeMs).toBe(written); // used, not rewritten
    expect((await runProcess([join(OUR_BIN, 'host-local')], { PATH, ...env('c') }, conf)).code).toBe(0);
    expect(readdirSync(cacheDir).sort()).toEqual([expect.stringMatching(/^host-local-[0-9a-f]{16}-/), files[0]]);
  });
});

describe('kube-flannel\'s "type": "flannel" network through libcni, standalone, no Node.js', () => {
  let daemon: ChildProcess | undefined;
  let daemonLog = '';
  afterAll(async () => {
    if (daemon && daemon.exitCode === null) {
      const exited = new Promise((r) => daemon!.once('exit', r));
      daemon.kill('SIGTERM');
      await exited;
    }
  });

  it('the daemon leases a subnet; a pod gets an address from it (ADD, CHECK, DEL)', async () => {
    const dir = join(lab.dir, 'flannel');
    mkdirSync(dir);
    const leaseDir = join(dir, 'leases');
    const subnetFile = join(dir, 'subnet.env');
    lab.in(lab.host, ['ip', 'link', 'add', 'under0', 'type', 'veth', 'peer', 'name', 'under1']);
    lab.in(lab.host, ['ip', 'addr', 'add', '192.168.93.1/24', 'dev', 'under0']);
    lab.in(lab.host, ['ip', 'link', 'set', 'under0', 'up']);
    lab.in(lab.host, ['ip', 'link', 'set', 'under1', 'up']);
    const flannel = join(STANDALONE_BIN, 'vxlan-flannel');
    const set = await noNode(['nsenter', `--net=${lab.hostPath}`, '--', flannel, 'network', 'set', '--network', '10.93.0.0/16', '--lease-dir', leaseDir]);
    expect(set.code, set.stderr).toBe(0);

    const argv = withoutNode(['nsenter', `--net=${lab.hostPath}`, '--', flannel, 'daemon', '--iface', 'under0', '--lease-dir', leaseDir, '--subnet-file', subnetFile, '--cni-data-dir', join(dir, 'cni')]);
    // CNI_TS_CODE_CACHE_DIR in the environment: a daemon command line stays the daemon.
    // GLIBC_TUNABLES: an operator's own malloc setting, which the daemon keeps.
    const tunables = 'glibc.malloc.arena_max=4';
    daemon = spawn(argv[0], argv.slice(1), { env: { PATH, CNI_TS_CODE_CACHE_DIR: join(dir, 'cc'), GLIBC_TUNABLES: tunables }, stdio: ['ignore', 'pipe', 'pipe'] });
    daemon.stdout!.on('data', (b: Buffer) => (daemonLog += b));
    daemon.stderr!.on('data', (b: Buffer) => (daemonLog += b));
    await waitFor('the daemon to write subnet.env', () => existsSync(subnetFile), 30_000, 100).catch((e: Error) => {
      throw new Error(`${e.message}; the daemon said:\n${daemonLog}`);
    });
    // The daemon restarted itself (same pid: unshare, sh and nsenter exec) with glibc's malloc
    // settings for a long-running process added to the operator's (malloc-tunables.ts).
    expect(readlinkSync(`/proc/${daemon.pid}/exe`)).toBe(flannel);
    // (glibc parses GLIBC_TUNABLES in place: /proc shows its ':' as NUL, one tunable per entry.)
    const environ = readFileSync(`/proc/${daemon.pid}/environ`, 'utf8').split('\0');
    const at = environ.findIndex((v) => v.startsWith('GLIBC_TUNABLES='));
    expect(environ.slice(at, at + 2)).toEqual([`GLIBC_TUNABLES=${tunables}`, 'glibc.malloc.mmap_threshold=16384']);
    // the operator CLI is an asset read when the daemon starts; its etcd chunk (etcd-http.ts) was never compiled
    expect(memoryHolds(daemon.pid!, 'kube-subnet-mgr')).toBe(true);
    for (const marker of ['/v3/kv/range', 'create_request']) expect(memoryHolds(daemon.pid!, marker), marker).toBe(false);
    const subnet = /^FLANNEL_SUBNET=(10\.93\.\d+)\.1\/24$/m.exec(readFileSync(subnetFile, 'utf8'))?.[1];
    expect(subnet, readFileSync(subnetFile, 'utf8')).toBeDefined();

    const netconfPath = join(dir, 'net.d');
    mkdirSync(netconfPath);
    writeFileSync(
      join(netconfPath, '10-flannel.conflist'),
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'cbr0',
        plugins: [
          { type: 'flannel', subnetFile, dataDir: join(dir, 'cni'), ipam: { dataDir: join(dir, 'ipam') }, delegate: { hairpinMode: true, isDefaultGateway: true } },
        ],
      }),
    );
    const pod = lab.netns('pod');
    const drive = (cmd: string) =>
      noNode(['nsenter', `--net=${lab.hostPath}`, '--', inject('libcniDriver'), cmd, 'cbr0', lab.path(pod), 'pod1'], { NETCONFPATH: netconfPath, CNI_PATH: STANDALONE_BIN });
    const added = await drive('add');
    expect(added.code, added.stdout + added.stderr).toBe(0);
    expect(added.json.ips[0].address).toMatch(new RegExp(`^${subnet!.replaceAll('.', '\\.')}\\.\\d+/24$`));
    expect(lab.ping(pod, `${subnet}.1`)).toBe(true);
    // The operator's view of the masquerade rules the delegated bridge made: a table, or JSON.
    const bridge = join(STANDALONE_BIN, 'bridge');
    const table = await noNode(['nsenter', `--net=${lab.hostPath}`, '--', bridge, 'masq', '--network', 'cbr0']);
    expect(table.code, table.stderr).toBe(0);
    const podIp = added.json.ips[0].address.split('/')[0];
    // named as the rules' comment names them: the network, not its hash
    expect(table.stdout).toMatch(new RegExp(`^NETWORK +CONTAINER +IFNAME +IPS +MASQUERADE +BACKEND +TAG\ncbr0 +pod1 +eth0 +${podIp.replaceAll('.', '\\.')} +yes +iptables +[0-9a-f]{20}\n$`));
    const json = await noNode(['nsenter', `--net=${lab.hostPath}`, '--', bridge, 'masq', '--network', 'cbr0', '--json']);
    expect(JSON.parse(json.stdout)).toMatchObject([{ network: 'cbr0', containerId: 'pod1', ifname: 'eth0', ips: [podIp], masquerades: true, backend: 'iptables' }]);
    const checked = await drive('check');
    expect(checked.code, checked.stdout + checked.stderr).toBe(0);
    const deleted = await drive('del');
    expect(deleted.code, deleted.stdout + deleted.stderr).toBe(0);
    expect(lab.link(pod, 'eth0')).toBeUndefined();

    const exited = new Promise<number | null>((r) => daemon!.once('exit', r));
    daemon!.kill('SIGTERM');
    expect(await exited, daemonLog).toBe(0);
    expect(daemonLog).toMatch(/SIGTERM: stopping/);
  });
});

describe('install-plugin and install-conf as init containers run them', () => {
  it('four at once, each pid 1 in its own pid namespace (overlapping rollouts), ten times: every one succeeds and the installed files are whole', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'sa-install-'));
    try {
      const bin = join(tmp, 'bin');
      const netd = join(tmp, 'net.d');
      mkdirSync(bin);
      mkdirSync(netd);
      const conf = join(tmp, 'cni-conf.json');
      writeFileSync(conf, '{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel","delegate":{"hairpinMode":true}}]}');
      const exe = join(STANDALONE_BIN, 'vxlan-flannel');
      // as pid 1 each: the temp names of the old code (".<name>.<pid>.tmp") were the same in all four
      const asPid1 = (argv: string[]) => runProcess(['unshare', '--pid', '--fork', '--', ...argv], { PATH }, '');
      for (let round = 0; round < 10; round++) {
        rmSync(join(bin, 'flannel'), { force: true }); // a new version each round: every installer copies
        rmSync(join(netd, '10-flannel.conflist'), { force: true });
        const runs = await Promise.all(
          Array.from({ length: 4 }, (_, i) =>
            i % 2 ? asPid1([exe, 'install-conf', conf, join(netd, '10-flannel.conflist')]) : asPid1([exe, 'install-plugin', '--from', exe, bin, 'flannel']),
          ),
        );
        for (const r of runs) expect([r.code, r.stderr], `round ${round}`).toEqual([0, '']);
        expect(readdirSync(bin)).toEqual(['flannel']); // no temp file left
        expect(statSync(join(bin, 'flannel')).size).toBe(statSync(exe).size);
        expect(statSync(join(bin, 'flannel')).mode & 0o777).toBe(0o755);
        expect(readFileSync(join(netd, '10-flannel.conflist'), 'utf8')).toBe(readFileSync(conf, 'utf8'));
      }
      const installed = await runProcess([join(bin, 'flannel')], { CNI_COMMAND: 'VERSION', PATH }, '{"cniVersion":"1.0.0"}');
      expect([installed.code, installed.json?.cniVersion]).toEqual([0, '1.0.0']);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});

describe('credentials in a URL', () => {
  it('are refused and never printed, by either form of the daemon', async () => {
    for (const exe of [join(OUR_BIN, 'vxlan-flannel'), join(STANDALONE_BIN, 'vxlan-flannel')]) {
      for (const args of [
        ['--kube-subnet-mgr', '--node-name', 'n1', '--kube-api-url', 'https://:hunter2@127.0.0.1:1/'],
        ['--etcd-endpoints', 'http://root:hunter2@127.0.0.1:1'],
      ]) {
        const r = await runProcess([exe, 'daemon', '--subnet-file', '/nonexistent/subnet.env', ...args], { PATH }, '');
        expect(r.code, `${exe} ${args.join(' ')}`).toBe(1);
        expect(r.stderr).toMatch(/must not carry a user or password/);
        expect(r.stdout + r.stderr).not.toContain('hunter2');
      }
    }
  });
});
