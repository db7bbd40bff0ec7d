// Per-attachment masquerade (SNAT to the outgoing interface's address for
// traffic leaving the attachment's subnets): the API the bridge uses, over
// two backends as the Go plugins have them (ipmasq_iptables_linux.go,
// ipmasq_nftables_linux.go): masq-iptables.ts and masq-nftables.ts. What a
// rule of ours looks like (owner tags, comment) is masq-rule.ts.
import { settleAll } from '../util/settle';
import { iptablesMasqAdd, iptablesMasqEntries, iptablesMasqList, iptablesMasqRemoval } from './masq-iptables';
import { nftMasqAdd, nftMasqEntries, nftMasqList, nftMasqRemoval } from './masq-nftables';
import { checkTarget, masqChain, type MasqBackend, type MasqEntry, type MasqOwner, type MasqSelector, type MasqTarget, type Removal } from './masq-rule';

export type { MasqBackend, MasqTarget } from './masq-rule';

/** Installs masquerade for an attachment's addresses: one process per iptables family, or one nft. */
export async function masqAdd(backend: MasqBackend, owner: MasqOwner, targets: MasqTarget[]): Promise<void> {
  targets.forEach(checkTarget);
  if (targets.length === 0) return;
  await (backend === 'nftables' ? nftMasqAdd(owner, targets) : iptablesMasqAdd(owner, targets));
}

/** Every tagged masquerade entry of the backend. */
export async function masqList(backend: MasqBackend): Promise<MasqEntry[]> {
  if (backend === 'nftables') return nftMasqEntries(await nftMasqList());
  const entries = (await Promise.all([iptablesMasqList(4), iptablesMasqList(6)])).flatMap(iptablesMasqEntries);
  // An attachment with addresses of both families has an entry in each table.
  const byTag = new Map<string, MasqEntry>();
  for (const e of entries) {
    const seen = byTag.get(e.attTag);
    if (!seen) byTag.set(e.attTag, e);
    else {
      seen.ips.push(...e.ips.filter((ip) => !seen.ips.includes(ip)));
      seen.masquerades ||= e.masquerades;
    }
  }
  return [...byTag.values()];
}

/**
 * Removes the masquerade of every attachment `drop(netTag, attTag)` selects,
 * found by the tags in the rules' comments. Returns the removed attTags.
 * Idempotent: nothing found is not an error.
 */
async function masqRemove(backend: MasqBackend, drop: MasqSelector): Promise<string[]> {
  if (backend === 'nftables') return listAndRemove(nftMasqList, (rules) => nftMasqRemoval(rules, drop));
  const gone = await Promise.all(([4, 6] as const).map((family) => listAndRemove(() => iptablesMasqList(family), (table) => iptablesMasqRemoval(table, drop))));
  return [...new Set(gone.flat())];
}

/** How often a removal is tried against a fresh listing before its failure is reported. */
const REMOVE_ATTEMPTS = 5;

/**
 * Lists, then removes in one all-or-nothing command. That command fails when
 * the rules changed since the listing: a concurrent DEL (or GC) of the same
 * attachment removed them first, and a rule or chain that is already gone
 * makes iptables-restore -D/-F/-X or nft's delete by handle fail as a whole.
 * So a failure lists again and retries with what is left; when nothing is
 * left, the removal is done.
 */
async function listAndRemove<T>(list: () => Promise<T>, plan: (listing: T) => Removal): Promise<string[]> {
  for (let attempt = 1; ; attempt++) {
    const { gone, apply } = plan(await list());
    if (!apply) return gone;
    try {
      await apply();
      return gone;
    } catch (err) {
      if (attempt >= REMOVE_ATTEMPTS) throw err;
    }
  }
}

/** Removes one attachment's masquerade (ADD's undo, which knows the backend it used). */
export function masqDel(backend: MasqBackend, attTag: string): Promise<string[]> {
  return masqRemove(backend, (_net, att) => att === attTag);
}

const MASQ_BACKENDS: readonly MasqBackend[] = ['iptables', 'nftables'];

/**
 * masqRemove in both backends (DEL, GC): rules may have been installed with
 * another backend than the config names now (ipMasqBackend changed, or left
 * to auto-detection on a host whose tools changed). A backend whose tool is
 * not installed, or that holds no table of ours, has nothing to remove. Both
 * are tried even when one fails; then the first failure is thrown.
 */
export async function masqRemoveEverywhere(drop: MasqSelector): Promise<string[]> {
  const removed = await settleAll(MASQ_BACKENDS.map((b) => masqRemove(b, drop)));
  return [...new Set(removed.flat())];
}

/** One attachment's masquerade, from both backends (DEL). */
export function masqDelEverywhere(attTag: string): Promise<string[]> {
  return masqRemoveEverywhere((_net, att) => att === attTag);
}

/** What is missing of an attachment's masquerade, or undefined when all its addresses are covered (CHECK). */
export async function masqCheck(backend: MasqBackend, attTag: string, ips: readonly string[]): Promise<string | undefined> {
  const entry = (await masqList(backend)).find((e) => e.attTag === attTag);
  const missing = ips.filter((ip) => !entry?.ips.includes(ip));
  if (missing.length > 0) return `masquerade (${backend}) rules for ${missing.join(', ')} are missing`;
  if (ips.length > 0 && !entry?.masquerades) return `masquerade (${backend}): the MASQUERADE rule of chain ${masqChain(attTag)} is missing`;
  return undefined;
}
