// MAC spoof check: frames entering the bridge from a port must carry the
// attachment's MAC as source, or they are dropped (nftables, bridge family).
//
//   table bridge cni_ts_macspoofchk {
//     map ports { type ifname : verdict }            port name -> its chain
//     chain prerouting { hook prerouting priority -300; iifname vmap @ports }
//     chain port-<netTag>-<attTag> { ether saddr <MAC> return; drop }
//   }
//
// Everything about an attachment is reachable by name (port and chain), so
// setup and teardown are each one `nft -f -` with no listing, and teardown is
// idempotent: it first adds what it is about to delete.
import { exec } from './exec';
import { normalizeMac } from '../net/mac';
import { linkNameProblem } from '../net/ifname';

const SPOOFCHK_TABLE = 'cni_ts_macspoofchk';
const T = `bridge ${SPOOFCHK_TABLE}`;

export interface SpoofOwner {
  netTag: string;
  attTag: string;
}

const spoofChain = (o: SpoofOwner) => `port-${o.netTag}-${o.attTag}`;

function check(o: SpoofOwner, port: string, mac?: string): void {
  if (!/^[0-9a-f]{8}$/.test(o.netTag) || !/^[0-9a-f]{20}$/.test(o.attTag)) throw new Error('invalid spoof-check tags');
  if (linkNameProblem(port)) throw new Error(`invalid port name ${JSON.stringify(port)}`);
  // (lower case with colons: it goes into the nft script as written)
  if (mac !== undefined && normalizeMac(mac) !== mac) throw new Error(`invalid MAC ${JSON.stringify(mac)}`);
}

const base = [
  `add table ${T}`,
  `add chain ${T} prerouting { type filter hook prerouting priority -300; policy accept; }`,
  `add map ${T} ports { type ifname : verdict; }`,
];

/** Only `mac` may leave through `port` (the host end of the attachment's veth). */
export async function spoofchkAdd(o: SpoofOwner, port: string, mac: string): Promise<void> {
  check(o, port, mac);
  const chain = spoofChain(o);
  const script = [
    ...base,
    // The dispatch rule, exactly once: flush and re-add in the same transaction.
    `flush chain ${T} prerouting`,
    `add rule ${T} prerouting iifname vmap @ports`,
    `add chain ${T} ${chain}`,
    `flush chain ${T} ${chain}`,
    `add rule ${T} ${chain} ether saddr ${mac} return`,
    `add rule ${T} ${chain} drop`,
    `add element ${T} ports { "${port}" : jump ${chain} }`,
  ];
  await exec(['nft', '-f', '-'], { input: script.join('\n') + '\n' });
}

/** Removes the attachment's check; fine when it is not there. */
export async function spoofchkDel(o: SpoofOwner, port: string): Promise<void> {
  check(o, port);
  await exec(['nft', '-f', '-'], { input: teardown(o, port).join('\n') + '\n' });
}

function teardown(o: SpoofOwner, port: string): string[] {
  const chain = spoofChain(o);
  return [
    ...base,
    `add chain ${T} ${chain}`,
    `add element ${T} ports { "${port}" : jump ${chain} }`,
    `delete element ${T} ports { "${port}" }`,
    `flush chain ${T} ${chain}`,
    `delete chain ${T} ${chain}`,
  ];
}

interface NftObject {
  chain?: { name: string };
  map?: { name: string; elem?: unknown[] };
}

/**
 * GC: removes the checks of `netTag`'s attachments whose attTag `keep` does
 * not hold. Returns the removed attTags.
 */
export async function spoofchkGc(netTag: string, keep: (attTag: string) => boolean): Promise<string[]> {
  const run = await exec(['nft', '-j', 'list', 'table', 'bridge', SPOOFCHK_TABLE], { allow: [1] });
  if (run.code !== 0) {
    if (/No such file or directory/.test(run.stderr)) return [];
    throw new Error(`nft list table ${T} failed: ${run.stderr.trim()}`);
  }
  const objects = ((JSON.parse(run.stdout) as { nftables?: NftObject[] }).nftables ?? []);
  const portOf = new Map<string, string>();
  for (const o of objects) {
    if (o.map?.name !== 'ports') continue;
    for (const el of o.map.elem ?? []) {
      const pair = Array.isArray(el) ? el : undefined;
      const target = (pair?.[1] as { jump?: { target?: string } } | undefined)?.jump?.target;
      if (typeof pair?.[0] === 'string' && target) portOf.set(target, pair[0]);
    }
  }
  const script: string[] = [];
  const removed: string[] = [];
  const re = new RegExp(`^port-${netTag}-([0-9a-f]{20})$`);
  for (const o of objects) {
    const m = o.chain ? re.exec(o.chain.name) : null;
    if (!m || keep(m[1])) continue;
    removed.push(m[1]);
    const port = portOf.get(o.chain!.name);
    const owner = { netTag, attTag: m[1] };
    script.push(...(port ? teardown(owner, port) : [`flush chain ${T} ${o.chain!.name}`, `delete chain ${T} ${o.chain!.name}`]));
  }
  if (script.length) await exec(['nft', '-f', '-'], { input: script.join('\n') + '\n' });
  return removed;
}
