// What a masquerade rule of ours looks like in either backend: its owner (the
// tags in its comment) and its target. Every rule carries the comment
// "cni-ts:<netTag>:<attTag> <label>", so rules are found by their owner (DEL,
// GC, CHECK) without knowing the addresses: DEL still works when the
// container's namespace, and with it the addresses, are gone. netTag names the
// network (GC removes only its own network's rules), attTag the attachment
// (network, container ID, interface).
import { CommandError } from './exec';

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
  /** The network, container ID and interface the rule's label names, where the comment kept them (see labelOwner). */
  network?: string;
  containerId?: string;
  ifname?: string;
  /** Source addresses its rules match. */
  ips: string[];
  /** Whether a MASQUERADE rule is there (iptables: in the attachment's chain; nftables: every rule is one). */
  masquerades: boolean;
  backend: MasqBackend;
}

/** Selects attachments by their tags (DEL: one attTag; GC: the stale ones of a network). */
export type MasqSelector = (netTag: string, attTag: string) => boolean;

/** What removing the selected attachments takes, planned from one listing. */
export interface Removal {
  /** attTags whose rules the removal takes away. */
  gone: string[];
  /** One all-or-nothing command (iptables-restore, nft -f); absent when there is nothing to remove. */
  apply?: () => Promise<unknown>;
}

export const TAG_RE = /cni-ts:([0-9a-f]{8}):([0-9a-f]{20})/;
export const MULTICAST = { 4: '224.0.0.0/4', 6: 'ff00::/8' } as const;
const COMMENT_PREFIX = 'cni-ts:';
/** nftables keeps at most 128 bytes of comment. */
const MAX_COMMENT = 120;

/** The iptables chain of an attachment (the reference plugin's layout). */
export const masqChain = (attTag: string) => `CNI-BR-${attTag}`;

export function masqComment(o: MasqOwner): string {
  if (!/^[0-9a-f]{8}$/.test(o.netTag) || !/^[0-9a-f]{20}$/.test(o.attTag)) throw new Error('invalid masquerade tags');
  const label = o.label.replace(/[^\w.=:,/@+-]+/g, ' ').trim();
  return `${COMMENT_PREFIX}${o.netTag}:${o.attTag} ${label}`.slice(0, MAX_COMMENT).trim();
}

/**
 * What a rule's comment names in its label (the bridge's "net=x id=y if=z"):
 * the comment is cut at MAX_COMMENT characters, so a value the cut reached
 * ends in "…", and one it removed is absent.
 */
export function labelOwner(comment: string | undefined): Pick<MasqEntry, 'network' | 'containerId' | 'ifname'> {
  if (!comment) return {};
  const cut = comment.length >= MAX_COMMENT;
  const owner: Pick<MasqEntry, 'network' | 'containerId' | 'ifname'> = {};
  for (const [key, field] of [['net', 'network'], ['id', 'containerId'], ['if', 'ifname']] as const) {
    const m = new RegExp(` ${key}=(\\S+)( |$)`).exec(comment);
    if (m) owner[field] = cut && !m[2] ? `${m[1]}…` : m[1];
  }
  return owner;
}

export function checkTarget(t: MasqTarget): void {
  if (!/^[0-9a-fA-F.:]+$/.test(t.ip) || !/^[0-9a-fA-F.:]+\/\d{1,3}$/.test(t.subnet)) {
    throw new Error(`invalid masquerade target ${JSON.stringify(t)}`);
  }
}

/** The tool is not installed (spawn ENOENT): it cannot hold rules. */
export const notInstalled = (err: unknown) => (err as NodeJS.ErrnoException)?.code === 'ENOENT';

/** iptables-save on a kernel without that family's table (legacy iptables, module not loaded). */
export const noSuchTable = (err: unknown) =>
  err instanceof CommandError && /Table does not exist|do you need to insmod|can't initialize/i.test(err.result.stderr);
