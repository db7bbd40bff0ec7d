// Per-attachment masquerade (SNAT to the outgoing interface's address for
// traffic leaving the attachment's subnets), with iptables or nftables.
//
// Every rule carries a comment "cni-ts:<netTag>:<attTag> <label>", so rules
// are found by their owner (DEL, GC, CHECK) without knowing the addresses:
// DEL still works when the container's namespace, and with it the addresses,
// are gone. netTag identifies the network (GC removes only its own network's
// rules), attTag the attachment (network, container ID, interface).
//
// iptables (nat table, both families): a chain CNI-BR-<attTag> with
//   -d <subnet> ACCEPT (each subnet), ! -d <multicast> MASQUERADE,
// and for each address `-A POSTROUTING -s <ip> -j CNI-BR-<attTag>`: the
// reference plugin's layout, one iptables-restore per family.
// nftables: table inet cni_ts_masquerade, chain postrouting (nat hook), one
// rule per address: `ip saddr X ip daddr != {subnets} ip daddr != <multicast>
// masquerade`. One `nft -f -` per call.
import { CommandError, exec } from './exec';
import { settleAll } from '../util/settle';

export type MasqBackend = 'iptables' | 'nftables';

export interface MasqOwner {
  /** 8 hex chars naming the network. */
  netTag: string;
  /** 20 hex chars naming the attachment. */
  attTag: string;
  /** Readable suffix for operators ("net=x id=y if=z"); truncated to fit and stripped of unsafe characters. */
  label: string;
}

export interface MasqTarget {
  /** The attachment's address, without prefix length. */
  ip: string;
  family: 4 | 6;
  /** Its subnet, e.g. 10.1.0.0/24: traffic to it is not masqueraded. */
  subnet: string;
}

/** What a listing found for one attachment. */
export interface MasqEntry {
  netTag: string;
  attTag: string;
  /** Source addresses its rules match. */
  ips: string[];
  /** Whether a MASQUERADE rule is there (iptables: in the attachment's chain; nftables: every rule is one). */
  masquerades: boolean;
  backend: MasqBackend;
}

export const NFT_TABLE = 'cni_ts_masquerade';
const NFT_CHAIN = 'postrouting';
const COMMENT_PREFIX = 'cni-ts:';
const TAG_RE = /cni-ts:([0-9a-f]{8}):([0-9a-f]{20})/;
const MULTICAST = { 4: '224.0.0.0/4', 6: 'ff00::/8' } as const;
/** nftables keeps at most 128 bytes of comment. */
const MAX_COMMENT = 120;

export const masqChain = (attTag: string) => `CNI-BR-${attTag}`;

export function masqComment(o: MasqOwner): string {
  if (!/^[0-9a-f]{8}$/.test(o.netTag) || !/^[0-9a-f]{20}$/.test(o.attTag)) throw new Error('invalid masquerade tags');
  const label = o.label.replace(/[^\w.=:,/@+-]+/g, ' ').trim();
  return `${COMMENT_PREFIX}${o.netTag}:${o.attTag} ${label}`.slice(0, MAX_COMMENT).trim();
}

function checkTarget(t: MasqTarget): void {
  if (!/^[0-9a-fA-F.:]+$/.test(t.ip) || !/^[0-9a-fA-F.:]+\/\d{1,3}$/.test(t.subnet)) {
    throw new Error(`invalid masquerade target ${JSON.stringify(t)}`);
  }
}

// ---------------------------------------------------------------- iptables

const SAVE = { 4: 'iptables-save', 6: 'ip6tables-save' } as const;
const RESTORE = { 4: 'iptables-restore', 6: 'ip6tables-restore' } as const;

async function iptablesRestore(family: 4 | 6, lines: string[]): Promise<void> {
  await exec([RESTORE[family], '-w', '--noflush'], { input: ['*nat', ...lines, 'COMMIT', ''].join('\n') });
}

function iptablesAddLines(owner: MasqOwner, targets: MasqTarget[], family: 4 | 6): string[] {
  const chain = masqChain(owner.attTag);
  const c = `-m comment --comment "${masqComment(owner)}"`;
  const subnets = [...new Set(targets.map((t) => t.subnet))];
  return [
    `:${chain} - [0:0]`,
    ...subnets.map((s) => `-A ${chain} -d ${s} ${c} -j ACCEPT`),
    `-A ${chain} ! -d ${MULTICAST[family]} ${c} -j MASQUERADE`,
    ...targets.map((t) => `-A POSTROUTING -s ${t.ip}/${family === 4 ? 32 : 128} ${c} -j ${chain}`),
  ];
}

interface SavedRule {
  netTag: string;
  attTag: string;
  chain: string;
  /** The rule as iptables-save printed it, without the leading "-A CHAIN". */
  spec: string;
  source?: string;
}

interface SavedTable {
  family: 4 | 6;
  chains: Set<string>;
  rules: SavedRule[];
}

const notInstalled = (err: unknown) => (err as NodeJS.ErrnoException)?.code === 'ENOENT';
/** iptables-save on a kernel without the nat table of that family (legacy iptables, module not loaded). */
const noNatTable = (err: unknown) => err instanceof CommandError && /Table does not exist|do you need to insmod|can't initialize/i.test(err.result.stderr);

async function iptablesList(family: 4 | 6): Promise<SavedTable> {
  const table: SavedTable = { family, chains: new Set(), rules: [] };
  let stdout: string;
  try {
    ({ stdout } = await exec([SAVE[family], '-t', 'nat']));
  } catch (err) {
    // A host without ip6tables (or iptables), or without that nat table, cannot hold rules of that family.
    if (notInstalled(err) || noNatTable(err)) return table;
    throw err;
  }
  for (const line of stdout.split('\n')) {
    if (line.startsWith(':CNI-BR-')) table.chains.add(line.slice(1).split(' ')[0]);
    if (!line.startsWith('-A ')) continue;
    const tag = TAG_RE.exec(line);
    if (!tag) continue;
    const chain = line.slice(3).split(' ')[0];
    const src = /(?:^| )-s (\S+?)(?:\/\d+)?(?: |$)/.exec(line);
    table.rules.push({ netTag: tag[1], attTag: tag[2], chain, spec: line.slice(3 + chain.length + 1), source: src?.[1] });
  }
  return table;
}

/** What removing the attachments `drop` selects takes: the restore lines, and their attTags. */
function iptablesRemoval(table: SavedTable, drop: (netTag: string, attTag: string) => boolean): Removal {
  const gone = new Set<string>();
  const lines: string[] = [];
  for (const r of table.rules) {
    if (!drop(r.netTag, r.attTag)) continue;
    gone.add(r.attTag);
    if (r.chain !== masqChain(r.attTag)) lines.push(`-D ${r.chain} ${r.spec}`);
  }
  for (const att of gone) {
    const chain = masqChain(att);
    if (table.chains.has(chain)) lines.push(`-F ${chain}`, `-X ${chain}`);
  }
  return { gone: [...gone], apply: lines.length > 0 ? () => iptablesRestore(table.family, lines) : undefined };
}

// ---------------------------------------------------------------- nftables

interface NftRule {
  handle: number;
  comment?: string;
  expr?: unknown[];
}

async function nft(script: string): Promise<void> {
  await exec(['nft', '-f', '-'], { input: script });
}

function nftAddScript(owner: MasqOwner, targets: MasqTarget[]): string {
  const comment = masqComment(owner);
  const lines = [
    `add table inet ${NFT_TABLE}`,
    `add chain inet ${NFT_TABLE} ${NFT_CHAIN} { type nat hook postrouting priority srcnat; policy accept; }`,
  ];
  for (const t of targets) {
    const p = t.family === 4 ? 'ip' : 'ip6';
    const subnets = [...new Set(targets.filter((o) => o.family === t.family).map((o) => o.subnet))];
    lines.push(
      `add rule inet ${NFT_TABLE} ${NFT_CHAIN} ${p} saddr ${t.ip} ${p} daddr != { ${subnets.join(', ')} } ` +
        `${p} daddr != ${MULTICAST[t.family]} masquerade comment "${comment}"`,
    );
  }
  return lines.join('\n') + '\n';
}

async function nftListRules(): Promise<NftRule[]> {
  let run;
  try {
    run = await exec(['nft', '-j', 'list', 'chain', 'inet', NFT_TABLE, NFT_CHAIN], { allow: [1] });
  } catch (err) {
    if (notInstalled(err)) return []; // no nft, no nftables rules
    throw err;
  }
  if (run.code !== 0) {
    // No table (or chain) of ours, or a kernel without nf_tables: nothing of ours is there.
    if (/No such file or directory|Operation not supported|Protocol not supported/.test(run.stderr)) return [];
    throw new Error(`nft list chain inet ${NFT_TABLE} ${NFT_CHAIN} failed: ${run.stderr.trim()}`);
  }
  const parsed = (run.stdout.trim() ? JSON.parse(run.stdout) : {}) as { nftables?: { rule?: NftRule }[] };
  return (parsed.nftables ?? []).flatMap((o) => (o.rule ? [o.rule] : []));
}

/** The source address a rule matches (`ip saddr X` / `ip6 saddr X`). */
function nftSource(rule: NftRule): string | undefined {
  for (const e of rule.expr ?? []) {
    const m = (e as { match?: { op?: string; left?: { payload?: { field?: string } }; right?: unknown } }).match;
    if (m?.op === '==' && m.left?.payload?.field === 'saddr' && typeof m.right === 'string') return m.right;
  }
  return undefined;
}

// ---------------------------------------------------------------- API

/** Installs masquerade for an attachment's addresses: one process per iptables family, or one nft. */
export async function masqAdd(backend: MasqBackend, owner: MasqOwner, targets: MasqTarget[]): Promise<void> {
  targets.forEach(checkTarget);
  if (targets.length === 0) return;
  if (backend === 'nftables') {
    await nft(nftAddScript(owner, targets));
    return;
  }
  await Promise.all(
    ([4, 6] as const).map((family) => {
      const mine = targets.filter((t) => t.family === family);
      return mine.length ? iptablesRestore(family, iptablesAddLines(owner, mine, family)) : undefined;
    }),
  );
}

/** Every tagged masquerade entry of the backend. */
export async function masqList(backend: MasqBackend): Promise<MasqEntry[]> {
  const byTag = new Map<string, MasqEntry>();
  const note = (netTag: string, attTag: string, ip: string | undefined, masquerades: boolean) => {
    let e = byTag.get(attTag);
    if (!e) byTag.set(attTag, (e = { netTag, attTag, ips: [], masquerades: false, backend }));
    if (ip && !e.ips.includes(ip)) e.ips.push(ip);
    e.masquerades ||= masquerades;
  };
  if (backend === 'nftables') {
    for (const r of await nftListRules()) {
      const tag = r.comment ? TAG_RE.exec(r.comment) : null;
      if (tag) note(tag[1], tag[2], nftSource(r), true);
    }
  } else {
    for (const table of await Promise.all([iptablesList(4), iptablesList(6)])) {
      for (const r of table.rules) {
        const own = r.chain === masqChain(r.attTag);
        note(r.netTag, r.attTag, own ? undefined : r.source, own && / -j MASQUERADE(?: |$)/.test(` ${r.spec}`));
      }
    }
  }
  return [...byTag.values()];
}

/**
 * Removes the masquerade of every attachment `drop(netTag, attTag)` selects,
 * found by the tags in the rules' comments. Returns the removed attTags.
 * Idempotent: nothing found is not an error.
 */
export async function masqRemove(backend: MasqBackend, drop: (netTag: string, attTag: string) => boolean): Promise<string[]> {
  if (backend === 'nftables') {
    return listAndRemove(nftListRules, (listing) => {
      const rules = listing.filter((r) => {
        const tag = r.comment ? TAG_RE.exec(r.comment) : null;
        return !!tag && drop(tag[1], tag[2]);
      });
      const script = rules.map((r) => `delete rule inet ${NFT_TABLE} ${NFT_CHAIN} handle ${r.handle}\n`).join('');
      return { gone: [...new Set(rules.map((r) => TAG_RE.exec(r.comment!)![2]))], apply: script ? () => nft(script) : undefined };
    });
  }
  const gone = await Promise.all(([4, 6] as const).map((family) => listAndRemove(() => iptablesList(family), (table) => iptablesRemoval(table, drop))));
  return [...new Set(gone.flat())];
}

interface Removal {
  /** attTags whose rules the removal takes away. */
  gone: string[];
  /** One all-or-nothing command (iptables-restore, nft -f); absent when there is nothing to remove. */
  apply?: () => Promise<unknown>;
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

export const MASQ_BACKENDS: readonly MasqBackend[] = ['iptables', 'nftables'];

/**
 * masqRemove in both backends (DEL, GC): rules may have been installed with
 * another backend than the config names now (ipMasqBackend changed, or left
 * to auto-detection on a host whose tools changed). A backend whose tool is
 * not installed, or that holds no table of ours, has nothing to remove. Both
 * are tried even when one fails; then the first failure is thrown.
 */
export async function masqRemoveEverywhere(drop: (netTag: string, attTag: string) => boolean): Promise<string[]> {
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
