// `host-local repair` as an operator runs it (the built bin/host-local)
// against a real containerd (Debian's 1.6 + runc, a private instance): two
// live pods on two networks (eth0: bridge + host-local with ipMasq; eth1:
// vxlan-flannel over bridge + host-local), and the leaks a power loss leaves,
// made by calling the plugins directly for containers containerd never knew:
// one whose netns is gone, one whose netns is kept (its host veth is still
// on the bridge), one with a libcni cache entry modelled on containerd's, one
// on the overlay (a flannel saved config), and one too young to judge; and a
// pod removed through containerd whose address host-local parked for it
// (stickyTTL), which is the pod's, not a leak.
// --dry-run lists exactly the old leaks and changes nothing (the whole state
// compared: reservations and the index, iptables/nft rules, links, libcni's
// cache, flannel's saved configs); repair releases exactly them; the pods
// keep their addresses and can still ping each other; a second run has
// nothing to do; a stopped containerd makes repair refuse and change nothing.
// Networks cni-ts-repair (bridge cnitsrep0, 10.77.231.0/24) and
// cni-ts-repair-overlay (bridge cnitsrepo0, 10.78.231.0/24), all inside the
// private containerd's node namespace.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, readFileSync, readdirSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readConfDir, type NetworkConfigList } from '../../src/libcni/conf-dir';
import { attachmentTags, hostVethName } from '../../src/bridge/names';
import { PrivateContainerd, podAddresses, reservations, type Pod } from './containerd';
import { OUR_BIN, makeNetns, runPlugin, runProcess, sh } from './helpers';

const RESULTS = '/var/lib/cni/results';
let ctrd: PrivateContainerd;
let net: NetworkConfigList;
let overlay: NetworkConfigList;
let a: Pod;
let b: Pod;
/** A pod removed through containerd: its address parked for it. */
let parked: Pod;
/** The kept namespace of the leak whose host veth stays. */
let keptNetns: ReturnType<typeof makeNetns> | undefined;

interface Leak {
  network: string;
  containerID: string;
  ifname: string;
  addresses: string[];
}
const leaks: Leak[] = [];
let young: Leak;

beforeAll(async () => {
  ctrd = await PrivateContainerd.start({
    name: 'repair',
    bridge: 'cnitsrep0',
    subnet: '10.77.231.0/24',
    ipMasq: true,
    stickyTTL: '1h',
    overlay: { bridge: 'cnitsrepo0', subnet: '10.78.231.0/24' },
  });
  [net, overlay] = readConfDir(ctrd.confDir).networks;
});
afterAll(async () => {
  keptNetns?.remove();
  await ctrd?.stop();
});

/** Runs bin/host-local repair with the private containerd's endpoint and directories, as an operator would. */
function repair(...extra: string[]) {
  const argv = [join(OUR_BIN, 'host-local'), 'repair', '--runtime-endpoint', ctrd.endpoint, '--conf-dir', ctrd.confDir, '--bin-dir', ctrd.nodeBinDir, '--max-conf-num', '2', ...extra];
  return runProcess(argv, { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin' }, '');
}

const cacheOf = (network: string, id: string, ifname: string) => join(RESULTS, `${network}-${id}-${ifname}`);

/** Every file under `dir` (recursively) as name -> content @ mtime. */
function files(dir: string, only: (name: string) => boolean = () => true): Record<string, string> {
  const out: Record<string, string> = {};
  if (!existsSync(dir)) return out;
  for (const e of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    const p = join(e.parentPath ?? e.path, e.name);
    if (e.isFile() && only(e.name)) out[p] = `${readFileSync(p, 'utf8')} @${statSync(p).mtimeMs}`;
  }
  return out;
}

/** Everything repair could change, as text: reservations (and our index), libcni's cache, flannel's files, firewall rules, links. */
function nodeState() {
  const ours = (name: string) => name.startsWith(`${net.name}-`);
  const rules = (argv: string[]) =>
    ctrd
      .inNode(argv)
      .split('\n')
      .filter((l) => !l.startsWith('#'))
      .map((l) => l.replace(/\[\d+:\d+\]/g, ''))
      .join('\n');
  const links = (JSON.parse(ctrd.inNode(['ip', '-j', '-d', 'link', 'show'])) as { ifname: string; master?: string; ifalias?: string; linkinfo?: { info_kind?: string } }[])
    .map((l) => `${l.ifname} ${l.linkinfo?.info_kind ?? ''} master=${l.master ?? ''} alias=${l.ifalias ?? ''}`)
    .sort();
  return {
    ipam: files(ctrd.ipamDir),
    cache: files(RESULTS, ours),
    flannel: files(ctrd.flannelDir),
    iptables: rules(['iptables-save']),
    nft: rules(['nft', 'list', 'ruleset']),
    links,
  };
}

const pings = (netns: string, ip: string) => {
  try {
    return sh(['nsenter', `--net=${netns}`, '--', 'ping', '-c', '1', '-W', '2', ip]).includes('1 received');
  } catch {
    return false;
  }
};

/** The rows of repair's table (header and summary line left out), sorted. */
const tableRows = (stdout: string) =>
  stdout
    .trim()
    .split('\n')
    .slice(1, -1)
    .map((l) => l.split(/\s+/))
    .sort();
const expectedRows = (list: Leak[]) => list.map((l) => [l.network, l.containerID, l.ifname, l.addresses.join(',') || '-']).sort();

/** The masquerade tags present in the node's nat table. */
const masqTags = () => ctrd.inNode(['iptables-save', '-t', 'nat']);

describe('host-local repair against a private containerd', () => {
  it('runs two pods on two networks (eth0 bridge + host-local, eth1 vxlan-flannel)', async () => {
    expect([net.name, overlay.name]).toEqual([ctrd.network, ctrd.overlayNetwork]);
    a = await ctrd.runPod('pod-a');
    b = await ctrd.runPod('pod-b');
    for (const pod of [a, b]) {
      const addrs = podAddresses(pod.netns);
      expect(addrs.eth0).toEqual([expect.stringMatching(/^10\.77\.231\.\d+\/24$/)]);
      expect(addrs.eth1).toEqual([expect.stringMatching(/^10\.78\.231\.\d+\/24$/)]);
    }
    expect(Object.values(reservations(ctrd.ipamDir, overlay.name)).map(([id, ifname]) => `${id} ${ifname}`).sort()).toEqual([`${a.id} eth1`, `${b.id} eth1`].sort());
    expect(pings(a.netns, podAddresses(b.netns).eth1[0].split('/')[0])).toBe(true);
  });

  it("parks the address of a pod removed through containerd (its CNI DEL), under the pod's sandbox id", async () => {
    const c = await ctrd.runPod('pod-c');
    await ctrd.removePod(c.id);
    parked = c;
    expect(reservations(ctrd.ipamDir, net.name)[c.ips[0]]).toEqual([c.id, 'eth0']);
    // as old as the leaks below: only the parking keeps it
    const hourAgo = new Date(Date.now() - 3600_000);
    utimesSync(join(ctrd.ipamDir, net.name, c.ips[0]), hourAgo, hourAgo);
    expect(Object.values(reservations(ctrd.ipamDir, overlay.name)).map(([id]) => id)).not.toContain(c.id); // no stickyTTL there
    expect(sh([join(OUR_BIN, 'host-local'), 'ls', net.name, '--data-dir', ctrd.ipamDir, '--json'])).toContain('cni-ts/pod-c');
  });

  it('leaves leaks of containers containerd does not know, made by calling the plugins directly', async () => {
    const hourAgo = new Date(Date.now() - 3600_000);
    const add = async (list: NetworkConfigList, id: string, ifname: string, keepNetns = false) => {
      const ns = makeNetns(`cni-ts-rep-${id}`);
      const env = { CNI_COMMAND: 'ADD', CNI_CONTAINERID: id, CNI_NETNS: ns.path, CNI_IFNAME: ifname, CNI_PATH: ctrd.nodeBinDir };
      const plugin = list.plugins[0];
      const r = await runPlugin(join(ctrd.nodeBinDir, plugin.type as string), env, { ...plugin, name: list.name, cniVersion: list.cniVersion });
      if (keepNetns) keptNetns = ns;
      else ns.remove();
      expect(r.code, r.stdout + r.stderr).toBe(0);
      const leak = { network: list.name, containerID: id, ifname, addresses: (r.json.ips as { address: string }[]).map((i) => i.address.split('/')[0]) };
      return { leak, ns, result: r.json };
    };
    const old = (leak: Leak) => {
      leaks.push(leak);
      // what a power loss an hour ago left: every file of the attachment is that old
      const mine = (dir: string) => Object.keys(files(dir)).filter((f) => readFileSync(f, 'utf8').startsWith(leak.containerID) || f.includes(`:${leak.containerID}:`) || f.endsWith(`/${leak.containerID}`));
      for (const f of [...mine(join(ctrd.ipamDir, leak.network)), ...mine(ctrd.flannelDir)]) utimesSync(f, hourAgo, hourAgo);
      const cache = cacheOf(leak.network, leak.containerID, leak.ifname);
      if (existsSync(cache)) utimesSync(cache, hourAgo, hourAgo);
    };

    old((await add(net, 'leak-gone', 'eth0')).leak);
    old((await add(net, 'leak-kept', 'eth0', true)).leak);
    const cached = await add(net, 'leak-cached', 'eth0');
    // the entry containerd wrote for pod a, made this attachment's
    const entry = JSON.parse(readFileSync(cacheOf(net.name, a.id, 'eth0'), 'utf8'));
    const cniArgs = (entry.cniArgs as [string, string][]).map(([k, v]) => [k, k === 'K8S_POD_INFRA_CONTAINER_ID' ? 'leak-cached' : v]);
    writeFileSync(cacheOf(net.name, 'leak-cached', 'eth0'), JSON.stringify({ ...entry, containerId: 'leak-cached', netns: cached.ns.path, cniArgs, result: cached.result }));
    old(cached.leak);
    old((await add(overlay, 'leak-overlay', 'eth1')).leak);
    young = (await add(net, 'leak-young', 'eth0')).leak;

    expect(Object.values(reservations(ctrd.ipamDir, net.name)).map(([id]) => id).sort()).toEqual(
      [a.id, b.id, parked.id, 'leak-gone', 'leak-kept', 'leak-cached', 'leak-young'].sort(),
    );
    expect(readdirSync(ctrd.flannelDir)).toContain(`${overlay.name}:leak-overlay:eth1`);
    expect(ctrd.inNode(['ip', 'link', 'show', hostVethName('leak-kept', 'eth0')])).toContain('master cnitsrep0');
    for (const l of [...leaks, young]) expect(masqTags()).toContain(attachmentTags(l.network, l.containerID, l.ifname).attTag);
  });

  it('--dry-run lists exactly the old leaks, table and JSON, and changes nothing', async () => {
    const before = nodeState();
    const table = await repair('--dry-run');
    expect(table.code, table.stderr).toBe(0);
    expect(table.stderr).toBe('');
    expect(tableRows(table.stdout)).toEqual(expectedRows(leaks));
    expect(table.stdout.trim().split('\n').at(-1)).toBe('would release 4 attachments; kept 6 (4 of live sandboxes, 1 newer than 5m, 1 parked); dry run: nothing was changed');

    const json = await repair('--dry-run', '--json');
    expect(json.code, json.stderr).toBe(0);
    expect([...json.json].sort((x: Leak, y: Leak) => x.containerID.localeCompare(y.containerID))).toEqual([...leaks].sort((x, y) => x.containerID.localeCompare(y.containerID)));
    expect(json.stderr).toBe('would release 4 attachments; kept 6 (4 of live sandboxes, 1 newer than 5m, 1 parked); dry run: nothing was changed\n');

    expect(nodeState()).toEqual(before);
  });

  it('repair releases exactly the leaks: reservations, masquerade rules, the host veth, the cache entry, the saved config', async () => {
    const run = await repair();
    expect(run.code, run.stderr).toBe(0);
    expect(tableRows(run.stdout)).toEqual(expectedRows(leaks));
    expect(run.stdout.trim().split('\n').at(-1)).toBe('released 4 attachments; kept 6 (4 of live sandboxes, 1 newer than 5m, 1 parked)');

    const held = (network: string) => Object.values(reservations(ctrd.ipamDir, network)).map(([id, ifname]) => `${id} ${ifname}`).sort();
    expect(held(net.name)).toEqual([`${a.id} eth0`, `${b.id} eth0`, `${parked.id} eth0`, 'leak-young eth0'].sort());
    expect(held(overlay.name)).toEqual([`${a.id} eth1`, `${b.id} eth1`].sort());
    const rules = masqTags();
    for (const l of leaks) expect(rules).not.toContain(attachmentTags(l.network, l.containerID, l.ifname).attTag);
    for (const [network, id, ifname] of [[net.name, a.id, 'eth0'], [net.name, b.id, 'eth0'], [overlay.name, a.id, 'eth1'], [net.name, 'leak-young', 'eth0']]) {
      expect(rules).toContain(attachmentTags(network, id, ifname).attTag);
    }
    // the kept namespace lost its interface with the host veth; the pods' veths are all there
    expect(() => ctrd.inNode(['ip', 'link', 'show', hostVethName('leak-kept', 'eth0')])).toThrow(/does not exist/);
    expect((JSON.parse(sh(['ip', '-n', keptNetns!.name, '-j', 'link', 'show'])) as { ifname: string }[]).map((l) => l.ifname)).toEqual(['lo']);
    for (const pod of [a, b]) for (const ifname of ['eth0', 'eth1']) expect(ctrd.inNode(['ip', 'link', 'show', hostVethName(pod.id, ifname)])).toContain('state UP');
    expect(existsSync(cacheOf(net.name, 'leak-cached', 'eth0'))).toBe(false);
    for (const pod of [a, b]) expect([existsSync(cacheOf(net.name, pod.id, 'eth0')), existsSync(cacheOf(overlay.name, pod.id, 'eth1'))]).toEqual([true, true]);
    expect(readdirSync(ctrd.flannelDir).sort()).toEqual([`${overlay.name}:${a.id}:eth1`, `${overlay.name}:${b.id}:eth1`, a.id, b.id].sort());

    // the pods keep their addresses and connectivity on both networks
    for (const pod of [a, b]) expect(podAddresses(pod.netns).eth0).toEqual([`${pod.ips[0]}/24`]);
    expect(pings(a.netns, b.ips[0])).toBe(true);
    expect(pings(b.netns, podAddresses(a.netns).eth1[0].split('/')[0])).toBe(true);
  });

  it('a second repair has nothing to do', async () => {
    const before = nodeState();
    const again = await repair();
    expect([again.code, again.stdout, again.stderr]).toEqual([0, 'nothing to release; kept 6 (4 of live sandboxes, 1 newer than 5m, 1 parked)\n', '']);
    expect(nodeState()).toEqual(before);
  });

  it('refuses when containerd does not answer (exit 2, one line naming the endpoint) and changes nothing, with leaks on record', async () => {
    await ctrd.stopDaemon();
    const before = nodeState();
    const refused = await repair('--min-age', '0');
    expect(refused.code).toBe(2);
    expect(refused.stdout).toBe('');
    expect(refused.stderr).toMatch(new RegExp(`^host-local repair: container runtime at ${ctrd.endpoint} does not answer \\(ListPodSandbox: [^\\n]*\\); nothing was changed\\n$`));
    expect(nodeState()).toEqual(before);
  });
});
