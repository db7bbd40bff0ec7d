// The reservation store on disk, byte-compatible with the Go host-local:
//   <dataDir>/<network>/<ip>                  "containerID\r\nifname" (legacy: "containerID")
//   <dataDir>/<network>/last_reserved_ip.<N>  a bare IP, per range set
// A reservation is written whole to a temporary file and then hard-linked into
// place, so it appears complete or not at all; link() fails when the name
// exists, which makes it the same atomic "create if absent" as Go's O_EXCL.
import * as fs from 'node:fs';
import { join } from 'node:path';
import { IP } from '../net/ip';
import { ensureDir, readIfExists, removeFile } from '../util/fs';
import { ioFailure, onPath } from './io-failure';
import type { Owner } from './owner';
import type { ReservationStore } from './reservation-store';

const LINE_BREAK = '\r\n';
const LAST_RESERVED_PREFIX = 'last_reserved_ip.';

/** Sees one reservation file: its content (undefined when unreadable) and its open descriptor. */
export type FileVisitor = (name: string, content: Buffer | undefined, fd: number | undefined) => void;

export interface Reservation {
  ip: IP;
  /** The file's name: the address in Go's text form. */
  name: string;
  /** Undefined when the file is torn (empty) or unreadable. */
  owner?: Owner;
  /** For torn files only: when it was last written (0 when unreadable). */
  tornSinceMs?: number;
}

/** Parses a reservation file the way Go reads it (whitespace-trimmed). */
export function parseOwner(content: string): Owner | undefined {
  const text = content.trim();
  if (text === '') return undefined;
  const brk = text.indexOf(LINE_BREAK);
  if (brk < 0) return { containerId: text };
  return { containerId: text.slice(0, brk).trim(), ifname: text.slice(brk + LINE_BREAK.length) };
}

/** What a reservation file of `o` holds, as Go writes it. */
export const reservationContent = (o: Owner) => (o.ifname === undefined ? o.containerId : o.containerId + LINE_BREAK + o.ifname);

/** A file name that is a reservation: an IP in Go's canonical text form. */
export function reservationName(name: string): IP | undefined {
  const ip = IP.parse(name);
  // An IPv4 address parses only in its canonical form; IPv6 has many forms.
  return ip && (ip.family === 4 || ip.toString() === name) ? ip : undefined;
}

/**
 * reservationName() without building an address, for the per-file loop of a
 * rebuild (an IP per file is ~20 ms of 60,000): a canonical dotted quad is
 * four decimal numbers up to 255 without leading zeros; IPv6 takes the long way.
 */
function isReservationName(name: string): boolean {
  if (name.includes(':')) return reservationName(name) !== undefined;
  let parts = 0;
  let value = 0;
  let digits = 0;
  for (let i = 0; i <= name.length; i++) {
    const c = i < name.length ? name.charCodeAt(i) : 0x2e; // a '.' closes the last part
    if (c === 0x2e) {
      if (digits === 0 || value > 255) return false;
      parts++;
      value = 0;
      digits = 0;
    } else if (c >= 0x30 && c <= 0x39) {
      if (digits === 1 && value === 0) return false; // a leading zero
      value = value * 10 + (c - 0x30);
      digits++;
    } else return false;
  }
  return parts === 4;
}

/** Bigger than any reservation Go or we write (a container ID, CR LF, an interface name). */
const READ_BUFFER = Buffer.alloc(4096);

export class DiskStore implements ReservationStore {
  /** The Go-compatible directory of this network. */
  readonly dir: string;
  /** Content of the staged scratch file, if one is staged. */
  private staged: string | undefined;

  constructor(
    dataDir: string,
    readonly network: string,
    /** Where the temporary file for atomic writes lives; same filesystem as `dir`. */
    private readonly scratchDir: string,
  ) {
    this.dir = join(dataDir, network);
  }

  exists(): boolean {
    return fs.existsSync(this.dir);
  }

  create(): void {
    onPath('create', this.dir, () => ensureDir(this.dir));
  }

  path(ip: IP): string {
    return join(this.dir, ip.toString());
  }

  /** The owner of `ip`: undefined when free, null when the file is torn. */
  ownerOf(ip: IP): Owner | null | undefined {
    const content = readIfExists(this.path(ip));
    return content === undefined ? undefined : (parseOwner(content) ?? null);
  }

  /** Reserves `ip` for `owner` unless someone holds it; true when reserved. */
  reserve(ip: IP, owner: Owner): boolean {
    const staged = this.stage(owner);
    try {
      fs.linkSync(staged, this.path(ip));
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw ioFailure('reserve', this.path(ip), err);
    }
  }

  /**
   * The content of `owner`'s reservations, written and synced once per call in
   * a scratch file; each reservation is then a hard link to it. Reservation
   * files are never written in place, so sharing the inode is safe.
   */
  private stage(owner: Owner): string {
    const file = join(this.scratchDir, 'reservation.tmp');
    if (this.staged === reservationContent(owner)) return file;
    this.discardStaged();
    onPath('write', file, () => {
      const fd = fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o600);
      try {
        fs.writeSync(fd, reservationContent(owner));
        fs.fdatasyncSync(fd); // the content reaches the disk before any name points at it
      } finally {
        fs.closeSync(fd);
      }
    });
    this.staged = reservationContent(owner);
    return file;
  }

  /** Removes the scratch file. It may be a link to a live reservation: never rewrite it in place. */
  discardStaged(): void {
    this.staged = undefined;
    removeFile(join(this.scratchDir, 'reservation.tmp'));
  }

  /** Never needs free space: an unlink. */
  release(ip: IP): void {
    onPath('remove', this.path(ip), () => removeFile(this.path(ip)));
  }

  lastReserved(rangeSet: number): IP | undefined {
    const text = readIfExists(join(this.dir, LAST_RESERVED_PREFIX + rangeSet));
    return text === undefined ? undefined : IP.parse(text.trim());
  }

  /**
   * Written in place, as the reference does: it is only where the next search
   * starts, and a torn one reads as "none" (start of the range), so a temp
   * file and rename (~0.5 ms each on every ADD) would buy nothing. Overwritten
   * and then cut to length rather than truncated first: rewriting the bytes of
   * an existing file needs no free space, so a full filesystem leaves it as it was.
   */
  setLastReserved(rangeSet: number, ip: IP): void {
    const file = join(this.dir, LAST_RESERVED_PREFIX + rangeSet);
    const text = ip.toString();
    onPath('write', file, () => {
      const fd = fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_CREAT, 0o600);
      try {
        fs.writeSync(fd, text, 0);
        fs.ftruncateSync(fd, Buffer.byteLength(text));
      } finally {
        fs.closeSync(fd);
      }
    });
  }

  /**
   * Every reservation file's name and content, read into one reused buffer
   * (valid during the visit only), with nothing kept: this is the whole cost
   * of an index rebuild (one open, read and close per file; the Go plugin
   * makes seven calls per file on every ADD and DEL). `content` is undefined
   * when the file cannot be read.
   */
  eachFile(visit: FileVisitor): void {
    for (const name of this.reservationNames()) this.readOne(name, visit);
  }

  /**
   * The names of every reservation file, reading (visiting) only the files
   * whose status changed at or after `sinceMs` (a new file, a rewritten one):
   * one stat per file instead of an open, read and close.
   */
  eachFileChangedSince(sinceMs: number, visit: FileVisitor): Set<string> {
    const names = this.reservationNames();
    const prefix = this.dir + '/';
    for (const name of names) {
      const st = fs.lstatSync(prefix + name, { throwIfNoEntry: false });
      if (st && st.ctimeMs >= sinceMs) this.readOne(name, visit);
    }
    return new Set(names);
  }

  private reservationNames(): string[] {
    try {
      return fs.readdirSync(this.dir).filter(isReservationName);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw ioFailure('read', this.dir, err);
    }
  }

  private readOne(name: string, visit: FileVisitor): void {
    let fd: number;
    try {
      fd = fs.openSync(this.dir + '/' + name, fs.constants.O_RDONLY);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') visit(name, undefined, undefined);
      return;
    }
    try {
      const n = fs.readSync(fd, READ_BUFFER, 0, READ_BUFFER.length, 0);
      visit(name, n < READ_BUFFER.length ? READ_BUFFER.subarray(0, n) : fs.readFileSync(fd), fd);
    } catch {
      visit(name, undefined, undefined);
    } finally {
      fs.closeSync(fd);
    }
  }

  /** Every reservation, for GC and listing; a torn file says since when it is torn. */
  scan(): Reservation[] {
    const out: Reservation[] = [];
    this.eachFile((name, content, fd) => {
      const ip = reservationName(name)!;
      const owner = content && parseOwner(content.toString('utf8'));
      if (owner) out.push({ ip, name, owner });
      else out.push({ ip, name, tornSinceMs: fd === undefined ? 0 : fs.fstatSync(fd).mtimeMs });
    });
    return out;
  }
}
