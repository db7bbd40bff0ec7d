// podman 4.3 as the runtime, with its CNI backend: a plain `podman run
// --network <our network>` (the container named by podman: `crazy_antonelli`,
// passed to the plugins as K8S_POD_NAME) gets an address from our bridge and
// host-local, in both executable forms, and gives it back when it is removed.
// podman runs inside a network namespace of this file's own (its "host": the
// bridge is made there), with a storage, config and CNI directories of its own.
// Subnet 10.74.0.0/24.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeNetns, runProcess, sh, tempDir, OUR_BIN } from './helpers';
import { STANDALONE_BIN } from './no-node';

const PATH = process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin';
const IMAGE = 'localhost/cnits-busybox:test';

let tmp: ReturnType<typeof tempDir>;
let host: ReturnType<typeof makeNetns>;

/** podman, in the test's "host" namespace, with everything of its own under tmp. */
const podman = (args: string[]) =>
  runProcess(
    [
      'nsenter', `--net=${host.path}`, '--',
      'podman', '--root', join(tmp.path, 'root'), '--runroot', join(tmp.path, 'runroot'), '--storage-driver', 'vfs',
      '--cgroup-manager', 'cgroupfs', '--network-config-dir', join(tmp.path, 'net.d'), ...args,
    ],
    { PATH, CONTAINERS_CONF: join(tmp.path, 'containers.conf') },
    '',
  );

beforeAll(async () => {
  tmp = tempDir('podman-cni');
  host = makeNetns('pcni-host');
  sh(['ip', '-n', 'pcni-host', 'link', 'set', 'lo', 'up']);
  mkdirSync(join(tmp.path, 'net.d'));
  // a one-file image: the static busybox
  const rootfs = join(tmp.path, 'rootfs');
  mkdirSync(join(rootfs, 'bin'), { recursive: true });
  sh(['cp', '/bin/busybox', join(rootfs, 'bin', 'busybox')]);
  sh(['tar', '-C', rootfs, '-cf', join(tmp.path, 'rootfs.tar'), '.']);
}, 60_000);

afterAll(async () => {
  if (tmp) await podman(['rm', '--all', '--force']);
  host?.remove();
  tmp?.remove();
});

describe('podman with its CNI backend', () => {
  for (const [form, bin] of [['scripts', OUR_BIN], ['standalone', STANDALONE_BIN]] as const) {
    it(`${form}: a container podman names itself (an underscore in it) gets an address, and gives it back when removed`, async () => {
      const net = `cnits-${form}`;
      const dataDir = join(tmp.path, `ipam-${form}`);
      writeFileSync(join(tmp.path, 'containers.conf'), `[network]\nnetwork_backend = "cni"\ncni_plugin_dirs = ["${bin}"]\n`);
      writeFileSync(
        join(tmp.path, 'net.d', `${net}.conflist`),
        JSON.stringify({
          cniVersion: '1.0.0',
          name: net,
          plugins: [{ type: 'bridge', bridge: `pcni-${form.slice(0, 4)}`, isGateway: true, ipMasq: false, ipam: { type: 'host-local', dataDir, ranges: [[{ subnet: '10.74.0.0/24' }]] } }],
        }),
      );
      const imported = await podman(['import', join(tmp.path, 'rootfs.tar'), IMAGE]);
      expect(imported.code, imported.stderr).toBe(0);
      const run = await podman(['run', '--detach', '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=1024:1024', '--network', net, IMAGE, '/bin/busybox', 'sleep', '600']);
      expect(run.code, run.stderr).toBe(0);
      const id = run.stdout.trim();
      const name = (await podman(['inspect', '--format', '{{.Name}}', id])).stdout.trim();
      expect(name).toMatch(/^[a-z]+_[a-z]+$/); // podman's own kind of name, passed as K8S_POD_NAME
      const addr = await podman(['exec', id, '/bin/busybox', 'ip', '-4', '-o', 'addr', 'show', 'eth0']);
      expect(addr.stdout).toMatch(/inet 10\.74\.0\.\d+\/24/);
      const reserved = () => readdirSync(join(dataDir, net)).filter((f) => /^10\./.test(f));
      expect(reserved()).toHaveLength(1);
      const removed = await podman(['rm', '--force', '--time', '0', id]);
      expect(removed.code, removed.stderr).toBe(0);
      expect(reserved()).toEqual([]);
    });
  }
});
