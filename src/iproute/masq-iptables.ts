// Masquerade with iptables (nat table, both families): a chain
// CNI-BR-<attTag> with `-d <subnet> ACCEPT` (each subnet) and
// `! -d <multicast> MASQUERADE`, and for each address
// `-A POSTROUTING -s <ip> -j CNI-BR-<attTag>`: the reference plugin's layout,
// one iptables-restore per family.
import { exec } from './exec';
import { MULTICAST, TAG_RE, labelOwner, masqChain, masqComment, notInstalled, noSuchTable, type MasqEntry, type MasqOwner, type MasqSelector, type MasqTarget, type Removal } from './masq-rule';

const SAVE = { 4: 'iptables-save', 6: 'ip6tables-save' } as const;
const RESTORE = { 4: 'iptables-restore', 6: 'ip6tables-restore' } as const;

async function restore(family: 4 | 6, lines: string[]): Promise<void> {
  await exec([RESTORE[family], '-w', '--noflush'], { input: ['*nat', ...lines, 'COMMIT', ''].join('\n') });
}

function addLines(owner: MasqOwner, targets: MasqTarget[], family: 4 | 6): string[] {
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

/** One process per family that has targets. */
export async function iptablesMasqAdd(owner: MasqOwner, targets: MasqTarget[]): Promise<void> {
  await Promise.all(
    ([4, 6] as const).map((family) => {
      const mine = targets.filter((t) => t.family === family);
      return mine.length ? restore(family, addLines(owner, mine, family)) : undefined;
    }),
  );
}

interface SavedRule {
  netTag: string;
  attTag: string;
  /** The rule's comment (owner tags and label). */
  comment?: string;
  chain: string;
  /** The rule as iptables-save printed it, without the leading "-A CHAIN". */
  spec: string;
  source?: string;
}

export interface SavedTable {
  family: 4 | 6;
  chains: Set<string>;
  rules: SavedRule[];
}

/** The tagged rules of one family's nat table. */
export async function iptablesMasqList(family: 4 | 6): Promise<SavedTable> {
  const table: SavedTable = { family, chains: new Set(), rules: [] };
  let stdout: string;
  try {
    ({ stdout } = await exec([SAVE[family], '-t', 'nat']));
  } catch (err) {
    // A host without ip6tables (or iptables), or without that nat table, cannot hold rules of that family.
    if (notInstalled(err) || noSuchTable(err)) return table;
    throw err;
  }
  for (const line of stdout.split('\n')) {
    if (line.startsWith(':CNI-BR-')) table.chains.add(line.slice(1).split(' ')[0]);
    if (!line.startsWith('-A ')) continue;
    const tag = TAG_RE.exec(line);
    if (!tag) continue;
    const chain = line.slice(3).split(' ')[0];
    const src = /(?:^| )-s (\S+?)(?:\/\d+)?(?: |$)/.exec(line);
    const comment = /--comment (?:"((?:[^"\\]|\\.)*)"|(\S+))/.exec(line);
    const spec = line.slice(3 + chain.length + 1);
    table.rules.push({ netTag: tag[1], attTag: tag[2], chain, spec, source: src?.[1], comment: comment?.[1] ?? comment?.[2] });
  }
  return table;
}

/** The entries of one family's listing. */
export function iptablesMasqEntries(table: SavedTable): MasqEntry[] {
  const byTag = new Map<string, MasqEntry>();
  for (const r of table.rules) {
    let e = byTag.get(r.attTag);
    if (!e) {
      e = { netTag: r.netTag, attTag: r.attTag, ...labelOwner(r.comment), ips: [], masquerades: false, backend: 'iptables' };
      byTag.set(r.attTag, e);
    }
    const own = r.chain === masqChain(r.attTag);
    if (!own && r.source && !e.ips.includes(r.source)) e.ips.push(r.source);
    e.masquerades ||= own && / -j MASQUERADE(?: |$)/.test(` ${r.spec}`);
  }
  return [...byTag.values()];
}

/** What removing the attachments `drop` selects takes: the restore lines, and their attTags. */
export function iptablesMasqRemoval(table: SavedTable, drop: MasqSelector): Removal {
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
  return { gone: [...gone], apply: lines.length > 0 ? () => restore(table.family, lines) : undefined };
}
