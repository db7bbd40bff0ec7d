// GC (spec 1.1): the runtime names the attachments that are still valid;
// everything else the plugin holds for the network is garbage.
import { invalidConfig } from './errors';
import type { Json } from './config';

export interface Attachment {
  containerID: string;
  ifname: string;
}

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

/**
 * Reads `cni.dev/valid-attachments` (or the older `cni.dev/attachments`).
 * A missing key is an error rather than "nothing is valid": guessing there
 * would release every address of the network.
 */
export function validAttachments(conf: Json): AttachmentSet {
  const key = 'cni.dev/valid-attachments' in conf ? 'cni.dev/valid-attachments' : 'cni.dev/attachments';
  if (!(key in conf)) throw invalidConfig('GC needs the field "cni.dev/valid-attachments"');
  const raw = conf[key] ?? [];
  if (!Array.isArray(raw)) throw invalidConfig(`field "${key}" must be a list`);
  return new AttachmentSet(
    raw.map((a, i) => {
      const att = a as Partial<Attachment> | null;
      if (!att || typeof att.containerID !== 'string' || typeof att.ifname !== 'string') {
        throw invalidConfig(`field "${key}[${i}]" must be an object with string "containerID" and "ifname"`);
      }
      return { containerID: att.containerID, ifname: att.ifname };
    }),
  );
}
