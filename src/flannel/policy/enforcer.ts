// The kernel side of policy enforcement: our table `inet flannel-netpol`,
// written with `nft -f -` (one transaction per call: applied whole or not at
// all), its drop counters read back, its presence checked, its removal; and
// br_netfilter, without which packets between two pods of this node cross
// the bridge without meeting any IP hook.
import { exec } from '../../iproute/exec';
import { notInstalled } from '../../iproute/masq-rule';
import { readSysctl, writeSysctl } from '../../iproute/sysctl';
import type { Family } from '../../net/ip';
import type { Changes, Desired } from './engine';
import { TABLE, ZERO_COUNTERS, changesScript, fullScript, readCounters, type Counters } from './nft';

export { removeTable } from './table';

const nft = (script: string) => exec(['nft', '-f', '-'], { input: script });

/** Statements in a script: one per line, and each element of a set or map. */
const statements = (script: string) =>
  script
    .split('\n')
    .reduce(
      (n, line) => n + (line.startsWith('add element') || line.startsWith('delete element') ? line.split(',').length : line ? 1 : 0),
      0,
    );

/** The table as it is now (counters kept), replaced by `desired` in one transaction; returns the statements written. */
export async function replaceTable(desired: Desired): Promise<number> {
  const script = fullScript(desired, (await readTableCounters()) ?? ZERO_COUNTERS);
  await nft(script);
  return statements(script);
}

/** One batch of changes as one transaction; throws (nothing applied) when the kernel refuses any of it. Returns the statements written. */
export async function applyChanges(changes: Changes): Promise<number> {
  const script = changesScript(changes);
  if (script) await nft(script);
  return statements(script);
}

/** The drop counters; undefined when the table is not there. */
export async function readTableCounters(): Promise<Counters | undefined> {
  let run;
  try {
    run = await exec(['nft', '-j', 'list', 'counters', 'table', 'inet', TABLE], { allow: [1] });
  } catch (err) {
    if (notInstalled(err)) return undefined;
    throw err;
  }
  if (run.code !== 0) {
    if (/No such file or directory/.test(run.stderr)) return undefined;
    throw new Error(`nft list counters table inet ${TABLE} failed: ${run.stderr.trim()}`);
  }
  return readCounters(run.stdout);
}

/** Whether the table and its base chain are there (someone may have flushed the ruleset). */
export async function tablePresent(): Promise<boolean> {
  const run = await exec(['nft', 'list', 'chain', 'inet', TABLE, 'forward'], { allow: [1] });
  return run.code === 0 && /hook forward/.test(run.stdout);
}

const BRIDGE_KEYS: Record<Family, string> = { 4: 'net/bridge/bridge-nf-call-iptables', 6: 'net/bridge/bridge-nf-call-ip6tables' };

/**
 * Puts br_netfilter's switches on for `families`: bridged IPv4/IPv6 packets
 * then pass the IP hooks, where the table filters them. Returns what it
 * turned on (for the log); throws, saying what to do, when br_netfilter is
 * not loaded and cannot be (the switches do not exist) or a switch cannot be
 * set (a read-only /proc/sys).
 */
export async function ensureBridgeNetfilter(families: readonly Family[]): Promise<string[]> {
  if (readSysctl(BRIDGE_KEYS[4]) === undefined) {
    // a node agent with the right to load modules (the module is built in on many kernels)
    await exec(['modprobe', 'br_netfilter'], { allow: [1] }).catch(() => undefined);
    if (readSysctl(BRIDGE_KEYS[4]) === undefined) {
      throw new Error(
        'br_netfilter is not loaded (no net.bridge.bridge-nf-call-iptables), so traffic between two pods of this node is not filtered: load it (modprobe br_netfilter, or br_netfilter in /etc/modules-load.d)',
      );
    }
  }
  const changed: string[] = [];
  for (const f of families) {
    const key = BRIDGE_KEYS[f];
    if (readSysctl(key) === '1') continue;
    try {
      writeSysctl(key, '1');
    } catch (err) {
      throw new Error(
        `cannot set ${key.replace(/\//g, '.')}=1 (${(err as Error).message}), so traffic between two pods of this node is not filtered: set it on the node (sysctl -w ${key.replace(/\//g, '.')}=1)`,
      );
    }
    changed.push(`${key.replace(/\//g, '.')}=1`);
  }
  return changed;
}
