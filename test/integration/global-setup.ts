// Integration tests need root, the built bundles and the reference tools.
// A missing prerequisite fails the run loudly: nothing is skipped in silence.
import { accessSync, constants } from 'node:fs';
import { execFileSync } from 'node:child_process';

const REQUIRED_FILES = [
  'bin/host-local',
  '/usr/lib/cni/host-local', // Debian's containernetworking-plugins: the Go reference
  'bin/vxlan-flannel',
  '/usr/bin/etcd', // Debian's etcd-server: the flannel lease store
  '/usr/bin/etcdctl', // Debian's etcd-client: leases written by hand, as flanneld writes them
  'bin/bridge',
  '/usr/lib/cni/bridge', // the Go reference bridge: side-by-side comparison
  '/usr/lib/cni/tuning', // chained after our bridge through libcni (cnidrive)
  '/usr/lib/cni/portmap',
  '/usr/lib/cni/loopback', // containerd's CRI adds a loopback network to every pod
  '/bin/busybox', // Debian's busybox-static: the private containerd's pause image
];
const REQUIRED_COMMANDS = ['ip', 'nsenter', 'bridge', 'ping', 'sysctl', 'unshare', 'iptables-save', 'iptables-restore', 'ip6tables-save', 'ip6tables-restore', 'nft', 'go', 'containerd', 'ctr', 'runc', 'tar', 'kubectl'];

export default function setup(): void {
  const problems: string[] = [];
  if (process.getuid?.() !== 0) problems.push('integration tests must run as root (network namespaces, /var/lib/cni)');
  for (const f of REQUIRED_FILES) {
    try {
      accessSync(f, constants.X_OK);
    } catch {
      problems.push(`missing executable ${f} (run \`make build\`; install containernetworking-plugins)`);
    }
  }
  for (const c of REQUIRED_COMMANDS) {
    try {
      execFileSync('sh', ['-c', 'command -v "$1"', 'sh', c], { stdio: 'ignore' });
    } catch {
      problems.push(`missing command ${c}`);
    }
  }
  if (problems.length) throw new Error(`integration prerequisites missing:\n  ${problems.join('\n  ')}`);
}
