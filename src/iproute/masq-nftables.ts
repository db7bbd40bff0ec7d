// Masquerade with nftables: table inet cni_ts_masquerade, chain postrouting
// (nat hook), one rule per address:
// `ip saddr X ip daddr != {subnets} ip daddr != <multicast> masquerade`.
// One `nft -f -` per call.
import { exec } from './exec';
import { MULTICAST, TAG_RE, labelOwner, masqComment, notInstalled, type MasqEntry, type MasqOwner, type MasqSelector, type MasqTarget, type Removal } from './masq-rule';

export const NFT_TABLE = 'cni_ts_masquerade';
const NFT_CHAIN = 'postrouting';

export interface NftRule {
  handle: number;
  comment?: string;
  expr?: unknown[];
}

async function nft(script: string): Promise<void> {
  await exec(['nft', '-f', '-'], { input: script });
}

export async function nftMasqAdd(owner: MasqOwner, targets: MasqTarget[]): Promise<void> {
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
  await nft(lines.join('\n') + '\n');
}

/** The rules of our chain (none when nft, the table or nf_tables is missing). */
export async function nftMasqList(): Promise<NftRule[]> {
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

const tagOf = (r: NftRule) => (r.comment ? TAG_RE.exec(r.comment) : null);

export function nftMasqEntries(rules: readonly NftRule[]): MasqEntry[] {
  const byTag = new Map<string, MasqEntry>();
  for (const r of rules) {
    const tag = tagOf(r);
    if (!tag) continue;
    let e = byTag.get(tag[2]);
    if (!e) {
      e = { netTag: tag[1], attTag: tag[2], ...labelOwner(r.comment), ips: [], masquerades: true, backend: 'nftables' };
      byTag.set(tag[2], e);
    }
    const ip = nftSource(r);
    if (ip && !e.ips.includes(ip)) e.ips.push(ip);
  }
  return [...byTag.values()];
}

export function nftMasqRemoval(rules: readonly NftRule[], drop: MasqSelector): Removal {
  const mine = rules.filter((r) => {
    const tag = tagOf(r);
    return !!tag && drop(tag[1], tag[2]);
  });
  const script = mine.map((r) => `delete rule inet ${NFT_TABLE} ${NFT_CHAIN} handle ${r.handle}\n`).join('');
  return { gone: [...new Set(mine.map((r) => tagOf(r)![2]))], apply: script ? () => nft(script) : undefined };
}
