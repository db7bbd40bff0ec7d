// A watch's body, taken apart: newline-delimited JSON events, each checked
// for the shape the API promises before anyone reads it. The server (or
// whatever answers in its place) is not trusted with our memory or our CPU:
// a line has a size limit, and each chunk is searched for a newline once
// (a line that arrives in thousands of chunks costs its length, not its
// length squared).

/** The API's event types; BOOKMARK carries only a resourceVersion, ERROR a Status. */
export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';

/** An event whose envelope was checked: `object` is a JSON object (its contents are the reader's to check). */
export interface CheckedEvent {
  type: WatchEventType;
  object: Record<string, unknown>;
}

const TYPES: ReadonlySet<string> = new Set(['ADDED', 'MODIFIED', 'DELETED', 'BOOKMARK', 'ERROR']);

/** A JSON object (not null, not an array). */
export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A short, printable excerpt of what came, for an error message. */
export const excerpt = (text: string) => JSON.stringify(text.length > 200 ? `${text.slice(0, 200)}...` : text);

/** One line of a watch as an event; throws an Error saying what is wrong with it. */
export function parseWatchEvent(line: string): CheckedEvent {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    throw new Error(`a line that is not JSON: ${excerpt(line)}`);
  }
  if (!isObject(value)) throw new Error(`an event that is not a JSON object: ${excerpt(line)}`);
  if (typeof value.type !== 'string' || !TYPES.has(value.type)) throw new Error(`an event of unknown type: ${excerpt(line)}`);
  if (!isObject(value.object)) throw new Error(`an event (${value.type}) whose object is not a JSON object: ${excerpt(line)}`);
  return { type: value.type as WatchEventType, object: value.object };
}

/**
 * Cuts a byte stream into lines of at most `maxLineBytes` (without the
 * newline). Bytes, not characters: a newline byte never occurs inside a
 * UTF-8 sequence, so a line is decoded whole.
 */
export class LineSplitter {
  private partial: Buffer[] = [];
  private partialBytes = 0;

  constructor(private readonly maxLineBytes: number) {}

  /** The lines this chunk completes; throws when a line grows past the limit. */
  push(chunk: Buffer): string[] {
    const lines: string[] = [];
    let start = 0;
    for (let nl = chunk.indexOf(10); nl >= 0; nl = chunk.indexOf(10, start)) {
      if (this.partialBytes === 0) {
        // A line that came whole in this chunk (a watch event, usually) is decoded where it lies: no copy.
        if (nl - start > this.maxLineBytes) this.add(chunk.subarray(start, nl)); // throws
        lines.push(chunk.toString('utf8', start, nl));
      } else {
        this.add(chunk.subarray(start, nl));
        lines.push(Buffer.concat(this.partial, this.partialBytes).toString('utf8'));
        this.partial = [];
        this.partialBytes = 0;
      }
      start = nl + 1;
    }
    if (start < chunk.length) this.add(chunk.subarray(start));
    return lines;
  }

  /** Whether a line was begun and not finished. */
  get pending(): boolean {
    return this.partial.some((b) => b.some((byte) => byte !== 0x20 && byte !== 0x0d && byte !== 0x09));
  }

  private add(piece: Buffer): void {
    if (this.partialBytes + piece.length > this.maxLineBytes) {
      throw new Error(`a line longer than ${mib(this.maxLineBytes)} (the limit)`);
    }
    if (piece.length) {
      this.partial.push(Buffer.from(piece)); // a copy: the chunk's buffer is reused by the next read
      this.partialBytes += piece.length;
    }
  }
}

/** A byte count in MiB, for messages. */
export const mib = (bytes: number) => `${+(bytes / 2 ** 20).toFixed(2)} MiB`;
