// flanneld's rules with nftables (flanneld's EnableNFTables), in flanneld's
// tables: `ip flannel-ipv4` and `ip6 flannel-ipv6`, each with a base chain
// `postrtg` (nat, postrouting, srcnat) for --ip-masq and `forward` (filter,
// forward, priority filter) for --iptables-forward-rules.
//
// Every rule of ours carries a comment naming its text's hash, so one listing
// of the table tells whether a chain holds exactly the wanted rules in order.
// When it does, nothing runs; when not (a rule deleted by hand, an earlier
// network's rules, a chain flanneld made), the chain is replaced in one
// `nft -f -` transaction. Only our own tables are ever touched.
import { exec } from '../../iproute/exec';
import { sha256Hex } from '../../util/sha256';
import { notInstalled } from '../../iproute/masq-rule';

export interface NftChainSet {
  family: 4 | 6;
  chain: 'postrtg' | 'forward';
  /** The rules' text in order, without comments. */
  rules: string[];
}

const TABLE = { 4: 'ip flannel-ipv4', 6: 'ip6 flannel-ipv6' } as const;
const HOOK = {
  postrtg: 'type nat hook postrouting priority srcnat; policy accept;',
  forward: 'type filter hook forward priority filter; policy accept;',
} as const;
const MULTICAST = { 4: '224.0.0.0/4', 6: 'ff00::/8' } as const;

/** --ip-masq for one family: the iptables backend's rules (traffic-iptables.ts) in nft words. */
export function nftMasqSet(family: 4 | 6, network: string, subnet: string, randomFully: boolean): NftChainSet {
  const p = family === 4 ? 'ip' : 'ip6';
  const masq = randomFully ? 'masquerade fully-random' : 'masquerade';
  return {
    family,
    chain: 'postrtg',
    rules: [
      // kube-proxy's mark (0x4000 under mask 0x4000): kube-proxy masquerades those itself.
      'meta mark and 0x4000 == 0x4000 return',
      `${p} saddr ${subnet} ${p} daddr ${network} return`,
      `${p} saddr ${network} ${p} daddr ${subnet} return`,
      `${p} saddr != ${network} ${p} daddr ${subnet} return`,
      `${p} saddr ${network} ${p} daddr != ${MULTICAST[family]} ${masq}`,
      `${p} saddr != ${network} ${p} daddr ${network} ${masq}`,
    ],
  };
}

/** --iptables-forward-rules for one family. */
export function nftForwardSet(family: 4 | 6, network: string): NftChainSet {
  const p = family === 4 ? 'ip' : 'ip6';
  return { family, chain: 'forward', rules: [`${p} saddr ${network} accept`, `${p} daddr ${network} accept`] };
}

/** The comment that names a rule of ours: "flanneld <chain> <hash of its text>". */
export const ruleComment = (chain: string, rule: string) => `flanneld ${chain} ${sha256Hex(rule).slice(0, 12)}`;

interface Listing {
  chains: { name: string; type?: string; hook?: string }[];
  /** Per chain, its rules' comments in order. */
  comments: Map<string, (string | undefined)[]>;
}

/** Our table as `nft -j list table` printed it; an empty listing when the table is not there. */
export function readListing(json: string): Listing {
  const out: Listing = { chains: [], comments: new Map() };
  const objects = (JSON.parse(json) as { nftables?: Record<string, Record<string, unknown>>[] }).nftables ?? [];
  for (const o of objects) {
    if (o.chain) out.chains.push({ name: String(o.chain.name), type: o.chain.type as string, hook: o.chain.hook as string });
    if (o.rule) {
      const chain = String(o.rule.chain);
      out.comments.set(chain, [...(out.comments.get(chain) ?? []), o.rule.comment as string | undefined]);
    }
  }
  return out;
}

/** The nft script that makes the listing hold `set`; none when it does. */
export function planNftEnsure(listing: Listing, set: NftChainSet): string[] {
  const t = TABLE[set.family];
  const want = set.rules.map((r) => ruleComment(set.chain, r));
  const have = listing.comments.get(set.chain) ?? [];
  const chain = listing.chains.find((c) => c.name === set.chain);
  const wantHook = set.chain === 'postrtg' ? 'postrouting' : 'forward';
  if (chain && chain.hook === wantHook && have.length === want.length && have.every((c, i) => c === want[i])) return [];
  return [
    `add table ${t}`,
    // An existing chain is dropped and made anew in the same transaction (its type and hook may differ too).
    ...(chain ? [`flush chain ${t} ${set.chain}`, `delete chain ${t} ${set.chain}`] : []),
    `add chain ${t} ${set.chain} { ${HOOK[set.chain]} }`,
    ...set.rules.map((r, i) => `add rule ${t} ${set.chain} ${r} comment "${want[i]}"`),
  ];
}

/** The script that removes the chain (and the table once it holds no chain); none when it is not there. */
export function planNftRemove(listing: Listing, family: 4 | 6, chain: NftChainSet['chain']): string[] {
  const t = TABLE[family];
  if (!listing.chains.some((c) => c.name === chain)) return [];
  const last = listing.chains.every((c) => c.name === chain);
  return last ? [`delete table ${t}`] : [`flush chain ${t} ${chain}`, `delete chain ${t} ${chain}`];
}

async function list(family: 4 | 6, netns?: string): Promise<Listing> {
  const run = await exec(['nft', '-j', 'list', 'table', ...TABLE[family].split(' ')], { netns, allow: [1] });
  if (run.code !== 0) {
    if (/No such file or directory/.test(run.stderr)) return readListing('{}');
    throw new Error(`nft list table ${TABLE[family]} failed: ${run.stderr.trim()}`);
  }
  return readListing(run.stdout);
}

async function nft(script: string[], netns?: string): Promise<void> {
  await exec(['nft', '-f', '-'], { netns, input: script.join('\n') + '\n' });
}

/** Makes `set` present; returns whether anything was changed. */
export async function nftEnsure(set: NftChainSet, netns?: string): Promise<boolean> {
  const script = planNftEnsure(await list(set.family, netns), set);
  if (script.length) await nft(script, netns);
  return script.length > 0;
}

/** Removes our chain of `family`; returns whether it was there. A host without nft has none. */
export async function nftRemove(family: 4 | 6, chain: NftChainSet['chain'], netns?: string): Promise<boolean> {
  let listing: Listing;
  try {
    listing = await list(family, netns);
  } catch (err) {
    if (notInstalled(err)) return false;
    throw err;
  }
  const script = planNftRemove(listing, family, chain);
  if (script.length) await nft(script, netns);
  return script.length > 0;
}
