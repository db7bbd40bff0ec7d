// flanneld's rules with iptables, in flanneld's own layout so a node moving
// between flanneld and us keeps one set of rules: a chain of ours
// (FLANNEL-POSTRTG in nat, FLANNEL-FWD in filter) reached by one jump from
// the built-in chain (POSTROUTING, FORWARD), every rule commented
// "flanneld masq" / "flanneld forward".
//
// Keeping them in place is one iptables-save of the table when all is there.
// A missing jump is appended alone. A chain whose rules differ from the wanted
// list (a rule deleted by hand, an earlier network's rules) is rewritten whole
// in one iptables-restore: its rules are ordered (RETURNs before MASQUERADE),
// so a missing rule cannot simply be appended. Nothing outside our chain but
// our jump is ever touched.
import { exec } from '../../iproute/exec';
import { notInstalled, noSuchTable } from '../../iproute/masq-rule';

/** Where a rule set of ours lives. */
export interface ChainPlace {
  table: 'nat' | 'filter';
  /** Our chain. */
  chain: string;
  /** The built-in chain holding the jump to ours. */
  hook: string;
}

export const MASQ_PLACE: ChainPlace = { table: 'nat', chain: 'FLANNEL-POSTRTG', hook: 'POSTROUTING' };
export const FORWARD_PLACE: ChainPlace = { table: 'filter', chain: 'FLANNEL-FWD', hook: 'FORWARD' };

export interface ChainSet extends ChainPlace {
  /** The jump rule's spec, as iptables-save prints it (without "-A <hook>"). */
  jump: string;
  /** Our chain's rules in order, as iptables-save prints them (without "-A <chain>"). */
  rules: string[];
}

const SAVE = { 4: 'iptables-save', 6: 'ip6tables-save' } as const;
const RESTORE = { 4: 'iptables-restore', 6: 'ip6tables-restore' } as const;
const MULTICAST = { 4: '224.0.0.0/4', 6: 'ff00::/8' } as const;
/** kube-proxy marks packets it wants masqueraded itself (KUBE-MARK-MASQ). */
const KUBE_PROXY_MARK = '0x4000/0x4000';

/**
 * --ip-masq for one family: pod traffic within the cluster network is never
 * NATed, traffic from the cluster network to the outside (not multicast) is,
 * and so is traffic from outside the network (the host) to remote pods;
 * packets kube-proxy marked are left to kube-proxy.
 */
export function masqChainSet(family: 4 | 6, network: string, subnet: string, randomFully: boolean): ChainSet {
  const c = '-m comment --comment "flanneld masq"';
  const masq = `-j MASQUERADE${randomFully ? ' --random-fully' : ''}`;
  return {
    ...MASQ_PLACE,
    jump: `${c} -j FLANNEL-POSTRTG`,
    rules: [
      `-m mark --mark ${KUBE_PROXY_MARK} ${c} -j RETURN`,
      `-s ${subnet} -d ${network} ${c} -j RETURN`,
      `-s ${network} -d ${subnet} ${c} -j RETURN`,
      `! -s ${network} -d ${subnet} ${c} -j RETURN`,
      `-s ${network} ! -d ${MULTICAST[family]} ${c} ${masq}`,
      `! -s ${network} -d ${network} ${c} ${masq}`,
    ],
  };
}

/** --iptables-forward-rules: forwarding to and from the cluster network is accepted. */
export function forwardChainSet(network: string): ChainSet {
  const c = '-m comment --comment "flanneld forward"';
  return {
    ...FORWARD_PLACE,
    jump: `${c} -j FLANNEL-FWD`,
    rules: [`-s ${network} ${c} -j ACCEPT`, `-d ${network} ${c} -j ACCEPT`],
  };
}

interface Saved {
  chainExists: boolean;
  /** Our chain's rule specs in order. */
  rules: string[];
  /** Specs of the hook chain's rules that jump to our chain. */
  jumps: string[];
}

/** What iptables-save printed for one table, seen from `set`'s chains. */
function readSaved(saved: string, set: ChainPlace): Saved {
  const out: Saved = { chainExists: false, rules: [], jumps: [] };
  const own = `-A ${set.chain} `;
  const hook = `-A ${set.hook} `;
  for (const line of saved.split('\n')) {
    if (line.startsWith(`:${set.chain} `)) out.chainExists = true;
    else if (line.startsWith(own)) out.rules.push(line.slice(own.length));
    else if (line.startsWith(hook) && line.endsWith(` -j ${set.chain}`)) out.jumps.push(line.slice(hook.length));
  }
  return out;
}

/** The iptables-restore lines (one table) that make `saved` hold `set`; none when it does. */
export function planEnsure(saved: string, set: ChainSet): string[] {
  const now = readSaved(saved, set);
  const lines: string[] = [];
  const same = now.chainExists && now.rules.length === set.rules.length && now.rules.every((r, i) => r === set.rules[i]);
  // Declaring an existing chain in a --noflush restore flushes it: the rewrite is atomic.
  if (!same) lines.push(`:${set.chain} - [0:0]`, ...set.rules.map((r) => `-A ${set.chain} ${r}`));
  if (!now.jumps.includes(set.jump)) lines.push(`-A ${set.hook} ${set.jump}`);
  return lines;
}

/** The restore lines that remove our jumps and chain; none when neither is there. */
export function planRemove(saved: string, set: ChainPlace): string[] {
  const now = readSaved(saved, set);
  return [...now.jumps.map((j) => `-D ${set.hook} ${j}`), ...(now.chainExists ? [`-F ${set.chain}`, `-X ${set.chain}`] : [])];
}

async function save(family: 4 | 6, table: string, netns?: string): Promise<string> {
  return (await exec([SAVE[family], '-t', table], { netns })).stdout;
}

async function restore(family: 4 | 6, table: string, lines: string[], netns?: string): Promise<void> {
  await exec([RESTORE[family], '-w', '--noflush'], { netns, input: [`*${table}`, ...lines, 'COMMIT', ''].join('\n') });
}

/** Makes `set` present in `family`'s table; returns whether anything was changed. */
export async function iptablesEnsure(family: 4 | 6, set: ChainSet, netns?: string): Promise<boolean> {
  const lines = planEnsure(await save(family, set.table, netns), set);
  if (lines.length) await restore(family, set.table, lines, netns);
  return lines.length > 0;
}

/** Removes `set`'s chain and jumps from `family`'s table; returns whether anything was there. */
export async function iptablesRemove(family: 4 | 6, set: ChainPlace, netns?: string): Promise<boolean> {
  let saved: string;
  try {
    saved = await save(family, set.table, netns);
  } catch (err) {
    // No iptables of that family, or no such table: no rules of ours either.
    if (notInstalled(err) || noSuchTable(err)) return false;
    throw err;
  }
  const lines = planRemove(saved, set);
  if (lines.length) await restore(family, set.table, lines, netns);
  return lines.length > 0;
}
