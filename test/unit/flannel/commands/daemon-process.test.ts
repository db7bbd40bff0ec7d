// The daemon running on this node, as `vxlan-flannel status` without flags
// finds it: in a /proc laid out in a temp dir (each process's cmdline,
// environ, and its namespaces as the kernel's symlinks), then its flags and
// variables parsed as the daemon parses them.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { daemonArgs, describeDaemon, findDaemons } from '../../../../src/flannel/commands/daemon-process';
import { parseDaemonFlags } from '../../../../src/cli/vxlan-flannel';

describe('the daemon running on this node', () => {
  let proc: string;
  beforeEach(() => {
    proc = mkdtempSync(join(tmpdir(), 'fake-proc-'));
    fakeProcess('self', ['vxlan-flannel', 'status'], {}, 'net:[1]', 'mnt:[1]');
  });
  afterEach(() => rmSync(proc, { recursive: true, force: true }));

  function fakeProcess(pid: string, argv: string[], env: Record<string, string> | undefined, net: string, mnt: string): void {
    mkdirSync(join(proc, pid, 'ns'), { recursive: true });
    writeFileSync(join(proc, pid, 'cmdline'), argv.map((a) => `${a}\0`).join(''));
    if (env) writeFileSync(join(proc, pid, 'environ'), Object.entries(env).map(([k, v]) => `${k}=${v}\0`).join(''));
    symlinkSync(net, join(proc, pid, 'ns', 'net'));
    symlinkSync(mnt, join(proc, pid, 'ns', 'mnt'));
  }

  it('ours (standalone, or the script under node, or as `flannel`) and flanneld are daemons; other commands of ours are not', () => {
    expect(daemonArgs(['/opt/cni/bin/vxlan-flannel', 'daemon', '--lease-dir', '/x'])).toEqual({ kind: 'vxlan-flannel', args: ['--lease-dir', '/x'] });
    expect(daemonArgs(['node', '/usr/local/bin/vxlan-flannel', 'daemon'])).toEqual({ kind: 'vxlan-flannel', args: [] });
    expect(daemonArgs(['/opt/cni/bin/flannel', 'daemon', '-v=2'])).toEqual({ kind: 'vxlan-flannel', args: ['-v=2'] });
    expect(daemonArgs(['/opt/bin/flanneld', '--ip-masq', '--kube-subnet-mgr'])).toEqual({ kind: 'flanneld', args: ['--ip-masq', '--kube-subnet-mgr'] });
    expect(daemonArgs(['/opt/cni/bin/vxlan-flannel', 'status'])).toBeUndefined();
    expect(daemonArgs(['sh', '-c', 'vxlan-flannel daemon'])).toBeUndefined();
  });

  it('only those in this network namespace, oldest first, with their environment and whether they see our files', () => {
    fakeProcess('300', ['/opt/cni/bin/vxlan-flannel', 'daemon', '--lease-dir', '/var/lib/leases'], { FLANNELD_IFACE: 'eth1' }, 'net:[1]', 'mnt:[1]');
    fakeProcess('200', ['/usr/bin/flanneld', '--etcd-endpoints=http://10.0.0.1:2379'], undefined, 'net:[1]', 'mnt:[9]');
    fakeProcess('100', ['/opt/cni/bin/vxlan-flannel', 'daemon'], {}, 'net:[2]', 'mnt:[1]'); // another node
    fakeProcess('400', ['sleep', '100'], {}, 'net:[1]', 'mnt:[1]');
    expect(findDaemons(proc)).toEqual([
      { pid: 200, kind: 'flanneld', args: ['--etcd-endpoints=http://10.0.0.1:2379'], env: undefined, sameFiles: false },
      { pid: 300, kind: 'vxlan-flannel', args: ['--lease-dir', '/var/lib/leases'], env: { FLANNELD_IFACE: 'eth1' }, sameFiles: true },
    ]);
  });

  it('its flags as the daemon reads them: command line, then FLANNELD_* and the variables flags read; the password never shown', () => {
    const d = {
      pid: 7,
      kind: 'vxlan-flannel' as const,
      args: ['-etcd-endpoints=https://10.0.0.1:2379', '--etcd-username', 'flannel', '--etcd-password', 's3cret', '-v=2', '--some-future-flag'],
      env: { FLANNELD_SUBNET_FILE: '/run/other/subnet.env', FLANNELD_ETCD_PREFIX: '/my/net', NODE_NAME: 'worker-1' },
      sameFiles: true,
    };
    expect(parseDaemonFlags(d)).toMatchObject({
      etcdEndpoints: 'https://10.0.0.1:2379',
      etcdUsername: 'flannel',
      etcdPassword: 's3cret',
      etcdPrefix: '/my/net',
      subnetFile: '/run/other/subnet.env',
      nodeName: 'worker-1',
    });
    expect(describeDaemon(d)).toBe('pid 7: vxlan-flannel daemon -etcd-endpoints=https://10.0.0.1:2379 --etcd-username flannel --etcd-password *** -v=2 --some-future-flag');
    expect(describeDaemon({ ...d, args: ['--etcd-password=s3cret'] })).toBe('pid 7: vxlan-flannel daemon --etcd-password=***');
    // the file store with ours; flanneld has none and reads etcd on this host by default
    const ours = parseDaemonFlags({ kind: 'vxlan-flannel', args: ['--lease-dir=/srv/leases'] });
    expect([ours.leaseDir, ours.etcdEndpoints, ours.subnetFile]).toEqual(['/srv/leases', undefined, '/run/flannel/subnet.env']);
    expect(parseDaemonFlags({ kind: 'flanneld', args: [] }).etcdEndpoints).toBe('http://127.0.0.1:4001,http://127.0.0.1:2379');
    expect(parseDaemonFlags({ kind: 'flanneld', args: ['--kube-subnet-mgr'] }).etcdEndpoints).toBeUndefined();
  });
});
