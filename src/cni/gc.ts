// GC (spec 1.1): the runtime names the attachments that are still valid;
// everything else the plugin holds for the network is garbage.
//
// One key of our own narrows that: `cni-ts.dev/stale-attachments`, sent by
// `host-local repair`, names the attachments the caller found stale, and our
// plugins then release those and nothing else. A GC runs a moment after the
// caller asked the runtime what is live; without the key, a pod set up in
// that moment would be garbage too. Plugins that do not know the key ignore it
// and collect by the valid list alone, as the spec says.
import { invalidConfig } from './errors';
import type { Json } from './config';

export interface Attachment {
  containerID: string;
  ifname: string;
}

export const VALID_KEY = 'cni.dev/valid-attachments';
/** The name the spec first gave the key (libcni sends both, #1101). */
export const LEGACY_VALID_KEY = 'cni.dev/attachments';
export const STALE_KEY = 'cni-ts.dev/stale-attachments';
/** The keys of a GC config that a plugin hands on to its delegate. */
export const GC_KEYS = [VALID_KEY, LEGACY_VALID_KEY, STALE_KEY] as const;

export class AttachmentSet {
  private readonly pairs = new Set<string>();
  private readonly ids = new Set<string>();

  constructor(list: readonly Attachment[]) {
    for (const a of list) {
      this.pairs.add(`${a.containerID}\n${a.ifname}`);
      this.ids.add(a.containerID);
    }
  }

  has(containerID: string, ifname: string): boolean {
    return this.pairs.has(`${containerID}\n${ifname}`);
  }

  /** For state that records only the container (legacy files, per-container saved configs). */
  hasContainer(containerID: string): boolean {
    return this.ids.has(containerID);
  }
}

/** What one GC call may release. */
export class GcScope {
  private readonly validSet: AttachmentSet;
  private readonly staleSet?: AttachmentSet;

  constructor(
    readonly valid: readonly Attachment[],
    /** When the caller named the stale attachments: only these go. */
    readonly stale?: readonly Attachment[],
  ) {
    this.validSet = new AttachmentSet(valid);
    this.staleSet = stale && new AttachmentSet(stale);
  }

  /** The attachment's state goes. */
  releases(containerID: string, ifname: string): boolean {
    return !this.validSet.has(containerID, ifname) && (this.staleSet?.has(containerID, ifname) ?? true);
  }

  /**
   * State a plugin keeps for a deleted attachment on purpose (host-local's
   * parked addresses) goes only when the caller named the attachment stale: a
   * plain GC keeps it. (repair's own DEL of a stale cached attachment may have
   * parked what the GC that follows must release.)
   */
  releasesKept(containerID: string, ifname: string): boolean {
    return this.staleSet !== undefined && this.releases(containerID, ifname);
  }

  /** State that records only the container goes (legacy files, per-container saved configs). */
  releasesContainer(containerID: string): boolean {
    return !this.validSet.hasContainer(containerID) && (this.staleSet?.hasContainer(containerID) ?? true);
  }
}

/**
 * Reads `cni.dev/valid-attachments` (or the older `cni.dev/attachments`) and
 * our `cni-ts.dev/stale-attachments`. A missing valid list is an error rather
 * than "nothing is valid": guessing there would release every address of the
 * network.
 */
export function gcScope(conf: Json): GcScope {
  const key = VALID_KEY in conf ? VALID_KEY : LEGACY_VALID_KEY;
  if (!(key in conf)) throw invalidConfig(`GC needs the field "${VALID_KEY}"`);
  return new GcScope(attachmentList(conf, key), STALE_KEY in conf ? attachmentList(conf, STALE_KEY) : undefined);
}

function attachmentList(conf: Json, key: string): Attachment[] {
  const raw = conf[key] ?? [];
  if (!Array.isArray(raw)) throw invalidConfig(`field "${key}" must be a list`);
  return raw.map((a, i) => {
    const att = a as Partial<Attachment> | null;
    if (!att || typeof att.containerID !== 'string' || typeof att.ifname !== 'string') {
      throw invalidConfig(`field "${key}[${i}]" must be an object with string "containerID" and "ifname"`);
    }
    return { containerID: att.containerID, ifname: att.ifname };
  });
}
