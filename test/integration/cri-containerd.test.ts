// The CRI client and our plugins against a real containerd (Debian's 1.6 +
// runc): pods run through CRI get addresses from our bridge + host-local,
// ListPodSandbox sees them, the GC runner (containerd's own conf dir, valid
// attachments from ListPodSandbox) collects what containerd does not know and
// nothing else, containerd's CNI DEL releases a removed pod's reservation, and
// a stopped containerd is an error, never an empty list.
// Network cni-ts-cri, bridge cnitscri0, 10.77.230.0/24, all inside the
// private containerd's node namespace.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readConfDir } from '../../src/libcni/conf-dir';
import { gcNetwork } from '../../src/libcni/gc-network';
import { CriClient, CriError } from '../../src/runtime/cri';
import { PrivateContainerd, podAddresses, reservations, type Pod } from './containerd';
import { makeNetns, runPlugin, sh } from './helpers';

const BRIDGE = 'cnitscri0';
let ctrd: PrivateContainerd;
let a: Pod;
let b: Pod;

beforeAll(async () => {
  ctrd = await PrivateContainerd.start({ name: 'cri', bridge: BRIDGE, subnet: '10.77.230.0/24' });
});
afterAll(async () => {
  await ctrd?.stop();
});

/** libcni's results cache file of an attachment on eth0. */
const cacheOf = (network: string, id: string) => join('/var/lib/cni/results', `${network}-${id}-eth0`);

const pings = (netns: string, ip: string) => {
  try {
    return sh(['nsenter', `--net=${netns}`, '--', 'ping', '-c', '1', '-W', '2', ip]).includes('1 received');
  } catch {
    return false;
  }
};

describe('a private containerd running our bridge + host-local', () => {
  it('answers Version over CRI runtime.v1', async () => {
    expect(await ctrd.cri.version()).toMatchObject({ runtimeName: 'containerd', runtimeApiVersion: 'v1' });
  });

  it('runs two pods with addresses from our plugins, reserved under their sandbox ids', async () => {
    a = await ctrd.runPod('pod-a');
    b = await ctrd.runPod('pod-b');
    for (const pod of [a, b]) {
      expect(pod.ips).toEqual([expect.stringMatching(/^10\.77\.230\.\d+$/)]);
      expect(podAddresses(pod.netns).eth0).toEqual([`${pod.ips[0]}/24`]);
    }
    expect(a.ips[0]).not.toBe(b.ips[0]);
    expect(reservations(ctrd.ipamDir, ctrd.network)).toEqual({ [a.ips[0]]: [a.id, 'eth0'], [b.ips[0]]: [b.id, 'eth0'] });
    // the bridge and the host veths are in the node namespace, not on the machine
    const ports = JSON.parse(ctrd.inNode(['ip', '-j', 'link', 'show', 'master', BRIDGE])) as unknown[];
    expect(ports).toHaveLength(2);
    expect(sh(['ip', 'link', 'show']).includes(BRIDGE)).toBe(false);
    expect(pings(a.netns, b.ips[0])).toBe(true);
    expect(pings(b.netns, '10.77.230.1')).toBe(true);
  });

  it('lists both pods with ListPodSandbox, ready, with their metadata', async () => {
    const listed = await ctrd.cri.listPodSandboxes();
    expect(listed.map((p) => [p.id, p.name, p.namespace, p.uid, p.ready]).sort()).toEqual(
      [
        [a.id, 'pod-a', 'cni-ts', 'pod-a-uid', true],
        [b.id, 'pod-b', 'cni-ts', 'pod-b-uid', true],
      ].sort(),
    );
    for (const p of listed) expect(Date.now() - p.createdAt.getTime()).toBeLessThan(60_000);
  });

  it("collects with the GC runner exactly the attachments containerd does not know, on containerd's own 1.0.0 network", async () => {
    const { networks, invalid } = readConfDir(ctrd.confDir);
    expect([networks.map((n) => [n.name, n.cniVersion]), invalid]).toEqual([[[ctrd.network, '1.0.0']], []]);
    const net = networks[0];
    // What a crash leaves: attachments made by the plugins whose containers are gone, one
    // with libcni's results cache entry (DELeted through the chain), one without (GC).
    const staleCache = cacheOf(net.name, 'leaked-cached');
    for (const id of ['leaked-cached', 'leaked-bare']) {
      const ns = makeNetns(`cni-ts-cri-${id}`);
      try {
        const env = { CNI_COMMAND: 'ADD', CNI_CONTAINERID: id, CNI_NETNS: ns.path, CNI_IFNAME: 'eth0', CNI_PATH: ctrd.nodeBinDir };
        const add = await runPlugin(join(ctrd.nodeBinDir, 'bridge'), env, { ...net.plugins[0], name: net.name, cniVersion: net.cniVersion });
        expect(add.code, add.stdout + add.stderr).toBe(0);
        if (id === 'leaked-cached') {
          // the entry containerd wrote for pod a, made this attachment's
          const cached = JSON.parse(readFileSync(cacheOf(net.name, a.id), 'utf8'));
          const cniArgs = (cached.cniArgs as [string, string][]).map(([k, v]) => [k, k === 'K8S_POD_INFRA_CONTAINER_ID' ? id : v]);
          writeFileSync(staleCache, JSON.stringify({ ...cached, containerId: id, netns: ns.path, cniArgs, result: add.json }));
        }
      } finally {
        ns.remove();
      }
    }
    expect(Object.values(reservations(ctrd.ipamDir, ctrd.network)).map(([id]) => id).sort()).toEqual([a.id, b.id, 'leaked-bare', 'leaked-cached'].sort());

    const live = await ctrd.cri.listPodSandboxes();
    const gc = () => gcNetwork(net, { path: [ctrd.nodeBinDir], validAttachments: live.map((p) => ({ containerID: p.id, ifname: 'eth0' })) });
    const report = await gc();
    expect(report).toMatchObject({ network: ctrd.network, disabled: false, collected: ['bridge'], skipped: [], errors: [] });
    expect(report.deleted.map((d) => d.containerId)).toEqual(['leaked-cached']);
    expect(reservations(ctrd.ipamDir, ctrd.network)).toEqual({ [a.ips[0]]: [a.id, 'eth0'], [b.ips[0]]: [b.id, 'eth0'] });
    expect(existsSync(staleCache)).toBe(false);
    // containerd's own cache entries of the live pods stay, and so does their connectivity
    for (const pod of [a, b]) expect(existsSync(cacheOf(net.name, pod.id))).toBe(true);
    expect(pings(a.netns, b.ips[0])).toBe(true);

    // a second run finds nothing
    expect(await gc()).toMatchObject({ deleted: [], collected: ['bridge'], skipped: [], errors: [] });
    expect(Object.keys(reservations(ctrd.ipamDir, ctrd.network))).toHaveLength(2);
  });

  it("releases a removed pod's reservation through containerd's CNI DEL; the other pod keeps its own", async () => {
    await ctrd.removePod(a.id);
    expect(reservations(ctrd.ipamDir, ctrd.network)).toEqual({ [b.ips[0]]: [b.id, 'eth0'] });
    expect((await ctrd.cri.listPodSandboxes()).map((p) => p.id)).toEqual([b.id]);
    expect(existsSync(a.netns)).toBe(false);
    expect(pings(b.netns, '10.77.230.1')).toBe(true);
  });

  it('fails with an error naming the endpoint once containerd is stopped, with a pod still on record', async () => {
    await ctrd.stopDaemon();
    for (const client of [ctrd.cri, new CriClient(ctrd.endpoint)]) {
      const err = await client.listPodSandboxes().then(
        () => undefined,
        (e: unknown) => e,
      );
      if (client !== ctrd.cri) client.close();
      expect(err).toBeInstanceOf(CriError);
      expect((err as CriError).unavailable).toBe(true);
      expect((err as CriError).message).toMatch(new RegExp(`^container runtime at ${ctrd.endpoint} does not answer \\(ListPodSandbox: `));
    }
  });

  it('leaves nothing behind when stopped: processes, mounts, node netns, libcni cache files, directories', async () => {
    await ctrd.stop();
    const cmdlines = readdirSync('/proc')
      .filter((p) => /^\d+$/.test(p))
      .map((p) => {
        try {
          return readFileSync(`/proc/${p}/cmdline`, 'utf8');
        } catch {
          return '';
        }
      });
    expect(cmdlines.filter((c) => c.includes(ctrd.dir))).toEqual([]);
    expect(readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(ctrd.dir);
    expect(existsSync(ctrd.nodeNetnsPath)).toBe(false);
    expect(existsSync(ctrd.dir)).toBe(false);
    const cache = existsSync('/var/lib/cni/results') ? readdirSync('/var/lib/cni/results') : [];
    expect(cache.filter((f) => f.includes(b.id) || f.includes(a.id))).toEqual([]);
  });
});
