// Integration tests need root, the built executables (scripts and standalone,
// amd64's and arm64's), the reference tools, and qemu-user's handler for arm64
// programs. Everything is checked here, before any test runs,
// and a missing prerequisite fails the run naming it: nothing is skipped in
// silence. Also builds the project's own libcni driver (test/libcni-driver)
// and the network policy tests' prober (test/netpol-agent) once for the run;
// tests find them with inject('libcniDriver') and inject('netpolAgent').
import { accessSync, constants, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { TestProject } from 'vitest/node';

const ROOT = resolve(__dirname, '../..');
const LIBCNI = '/usr/share/gocode/src/github.com/containernetworking/cni/libcni';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The libcni driver built for this run (test/libcni-driver). */
    libcniDriver: string;
    /** The network policy tests' server and prober (test/netpol-agent). */
    netpolAgent: string;
  }
}

/** What must be there, and where it comes from. */
const REQUIRED_FILES: [string, string][] = [
  ...['host-local', 'bridge', 'vxlan-flannel', 'flannel'].flatMap((p): [string, string][] => [
    [join(ROOT, 'bin', p), 'run `make build`'],
    [join(ROOT, 'dist/bin', p), 'run `make standalone ARCH=amd64`'],
    [join(ROOT, 'dist/arm64/bin', p), 'run `make standalone ARCH=arm64`'],
  ]),
  // loopback: containerd's CRI adds a loopback network to every pod
  ...['host-local', 'bridge', 'tuning', 'portmap', 'loopback'].map((p): [string, string] => [`/usr/lib/cni/${p}`, 'apt-get install containernetworking-plugins']),
  ['/usr/bin/etcd', 'apt-get install etcd-server'],
  ['/usr/bin/etcdctl', 'apt-get install etcd-client'],
  ['/bin/busybox', 'apt-get install busybox-static'], // the private containerd's pause image
];
const REQUIRED_COMMANDS: [string, string][] = [
  ...['ip', 'bridge'].map((c): [string, string] => [c, 'apt-get install iproute2']),
  ...['nsenter', 'unshare', 'mount'].map((c): [string, string] => [c, 'apt-get install util-linux']),
  ['sysctl', 'apt-get install procps'],
  ['ping', 'apt-get install iputils-ping'],
  ...['iptables-save', 'iptables-restore', 'ip6tables-save', 'ip6tables-restore'].map((c): [string, string] => [c, 'apt-get install iptables']),
  ['nft', 'apt-get install nftables'],
  ['go', 'apt-get install golang-go'],
  ['dpkg-deb', 'apt-get install dpkg'],
  ['readelf', 'apt-get install binutils'], // the architecture of every executable in the package and the images
  ['systemd-analyze', 'apt-get install systemd'],
  ...['containerd', 'ctr'].map((c): [string, string] => [c, 'apt-get install containerd']),
  ['runc', 'apt-get install runc'],
  ['tar', 'apt-get install tar'],
  ['openssl', 'apt-get install openssl'], // the stand-in API server's test CA
  ['podman', 'apt-get install podman'], // runs deploy/kube-flannel.yml's containers
  ['kubectl', 'apt-get install kubernetes-client (unless another kubectl is installed)'],
];

function missing(): string[] {
  const problems: string[] = [];
  if (process.getuid?.() !== 0) problems.push('integration tests must run as root (network namespaces, /var/lib/cni)');
  for (const [file, fix] of REQUIRED_FILES) {
    try {
      accessSync(file, constants.X_OK);
    } catch {
      problems.push(`missing executable ${file} (${fix})`);
    }
  }
  for (const [command, fix] of REQUIRED_COMMANDS) {
    try {
      execFileSync('sh', ['-c', 'command -v "$1"', 'sh', command], { stdio: 'ignore' });
    } catch {
      problems.push(`missing command ${command} (${fix})`);
    }
  }
  if (!existsSync(LIBCNI)) problems.push(`missing ${LIBCNI} (apt-get install golang-github-appc-cni-dev)`);
  problems.push(...arm64Problems());
  return problems;
}

/**
 * arm64's executables run here through qemu-user: the binfmt_misc handler,
 * with the F flag (its interpreter opened at registration, so it also runs in
 * podman's containers), and the arm64 C and C++ runtime the arm64 Node links.
 */
function arm64Problems(): string[] {
  const fix = 'as root, run scripts/test-prereqs.sh';
  const handler = '/proc/sys/fs/binfmt_misc/qemu-aarch64';
  if (!existsSync(handler)) return [`no binfmt_misc handler for arm64 executables (${handler}; ${fix})`];
  const problems: string[] = [];
  const text = readFileSync(handler, 'utf8');
  if (!/^enabled$/m.test(text)) problems.push(`${handler} is disabled (${fix})`);
  if (!/^flags: .*F/m.test(text)) {
    problems.push(`${handler} lacks the F flag: containers cannot run arm64 programs (remove it with \`echo -1 >${handler}\`, then ${fix})`);
  }
  for (const lib of ['/usr/lib/aarch64-linux-gnu/libc.so.6', '/usr/lib/aarch64-linux-gnu/libstdc++.so.6']) {
    if (!existsSync(lib)) problems.push(`missing ${lib} (${fix}: libc6:arm64, libstdc++6:arm64)`);
  }
  return problems;
}

export default function setup(project: TestProject): () => void {
  const problems = missing();
  if (problems.length) throw new Error(`integration prerequisites missing:\n  ${problems.join('\n  ')}`);
  const dir = mkdtempSync(join(tmpdir(), 'libcni-driver-'));
  const driver = join(dir, 'libcni-driver');
  const agent = join(dir, 'netpol-agent');
  for (const [what, out] of [['libcni-driver', driver], ['netpol-agent', agent]]) {
    try {
      // Debian's Go (and for the driver, libcni), no modules, no network; a few seconds with a fresh build cache.
      execFileSync('go', ['build', '-o', out, '.'], {
        cwd: join(ROOT, 'test', what),
        env: { ...process.env, GO111MODULE: 'off', GOPATH: '/usr/share/gocode', GOCACHE: join(dir, 'gocache'), GOFLAGS: '' },
        stdio: 'pipe',
      });
    } catch (err) {
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`building test/${what} failed: ${(err as { stderr?: Buffer }).stderr?.toString() ?? err}`);
    }
  }
  project.provide('libcniDriver', driver);
  project.provide('netpolAgent', agent);
  return () => rmSync(dir, { recursive: true, force: true });
}
