// A model of a node's firewall for unit tests: answers the commands
// src/flannel/traffic*.ts run (iptables-save / iptables-restore --noflush,
// their IPv6 twins, `nft -j list table`, `nft -f -`, `nft -c -f -`, `iptables
// --version`) from in-memory state, so the daemon's rules can be followed
// without touching a real firewall. Only what those modules print and parse
// is modelled; anything else answers undefined (not ours).
import type { RunResult } from '../../src/iproute/exec';

const ok = (stdout = ''): RunResult => ({ stdout, stderr: '', code: 0 });
const fail = (stderr: string): RunResult => ({ stdout: '', stderr, code: 1 });

interface NftChain {
  type?: string;
  hook?: string;
  /** The rules' comments in order. */
  comments: string[];
}

export class FakeFirewall {
  /** iptables: "<family> <table>" → chain → rule specs in order (the built-in chains exist from the start). */
  readonly ipt = new Map<string, Map<string, string[]>>();
  /** nftables: "ip flannel-ipv4" → chain → its hook and rules. */
  readonly nft = new Map<string, Map<string, NftChain>>();
  /** `iptables --version` prints this. */
  iptablesVersion = '1.8.9';
  /** `nft -c` refuses fully-random masquerading (an old kernel). */
  nftNoFullyRandom = false;
  /** Every command run, as text. */
  readonly calls: string[] = [];

  private table(family: string, table: string): Map<string, string[]> {
    const key = `${family} ${table}`;
    if (!this.ipt.has(key)) {
      const builtin = table === 'nat' ? ['PREROUTING', 'INPUT', 'OUTPUT', 'POSTROUTING'] : ['INPUT', 'FORWARD', 'OUTPUT'];
      this.ipt.set(key, new Map(builtin.map((c) => [c, []])));
    }
    return this.ipt.get(key)!;
  }

  /** Every rule of `family` as iptables-save prints it ("-A CHAIN spec"), both tables. */
  rules(family: 4 | 6): string[] {
    return ['nat', 'filter'].flatMap((t) => [...this.table(String(family), t)].flatMap(([chain, specs]) => specs.map((s) => `-A ${chain} ${s}`)));
  }

  /** The answer to `argv`, or undefined when it is not a firewall command. */
  run(argv: readonly string[], input = ''): RunResult | undefined {
    const cmd = argv.join(' ');
    let m: RegExpExecArray | null;
    if ((m = /^ip(6?)tables-save -t (nat|filter)$/.exec(cmd))) {
      this.calls.push(cmd);
      const t = this.table(m[1] ? '6' : '4', m[2]);
      const chains = [...t.keys()].map((c) => `:${c} ${/^[A-Z]+$/.test(c) ? 'ACCEPT' : '-'} [0:0]`);
      const rules = [...t].flatMap(([c, specs]) => specs.map((s) => `-A ${c} ${s}`));
      return ok([`*${m[2]}`, ...chains, ...rules, 'COMMIT', ''].join('\n'));
    }
    if ((m = /^ip(6?)tables-restore -w --noflush$/.exec(cmd))) {
      this.calls.push(`${cmd}\n${input}`);
      return this.restore(m[1] ? '6' : '4', input);
    }
    if (cmd === 'iptables --version') return ok(`iptables v${this.iptablesVersion} (nf_tables)\n`);
    if ((m = /^nft -j list table (ip6? \S+)$/.exec(cmd))) {
      this.calls.push(cmd);
      const t = this.nft.get(m[1]);
      if (!t) return fail(`Error: No such file or directory\nlist table ${m[1]}\n`);
      const objects = [...t].flatMap(([name, c]) => [{ chain: { name, type: c.type, hook: c.hook } }, ...c.comments.map((comment) => ({ rule: { chain: name, comment } }))]);
      return ok(JSON.stringify({ nftables: [{ metainfo: {} }, { table: {} }, ...objects] }));
    }
    if (cmd === 'nft -c -f -') return this.nftNoFullyRandom && input.includes('fully-random') ? fail('Error: Could not process rule: Operation not supported\n') : ok();
    if (cmd === 'nft -f -') {
      this.calls.push(`${cmd}\n${input}`);
      return this.nftScript(input);
    }
    return undefined;
  }

  private restore(family: string, input: string): RunResult {
    const lines = input.split('\n').filter(Boolean);
    const t = this.table(family, lines[0].slice(1));
    for (const line of lines.slice(1)) {
      let m: RegExpExecArray | null;
      if (line === 'COMMIT') break;
      if ((m = /^:(\S+) /.exec(line))) t.set(m[1], []); // declared in a --noflush restore: created, or flushed
      else if ((m = /^-A (\S+) (.*)$/.exec(line))) t.get(m[1])!.push(m[2]);
      else if ((m = /^-D (\S+) (.*)$/.exec(line))) {
        const specs = t.get(m[1]) ?? [];
        const i = specs.indexOf(m[2]);
        if (i < 0) return fail(`iptables-restore: line failed: ${line}\n`);
        specs.splice(i, 1);
      } else if ((m = /^-F (\S+)$/.exec(line))) t.set(m[1], []);
      else if ((m = /^-X (\S+)$/.exec(line))) t.delete(m[1]);
      else return fail(`iptables-restore: cannot model ${line}\n`);
    }
    return ok();
  }

  private nftScript(input: string): RunResult {
    for (const line of input.split('\n').filter(Boolean)) {
      let m: RegExpExecArray | null;
      if ((m = /^add table (ip6? \S+)$/.exec(line))) {
        if (!this.nft.has(m[1])) this.nft.set(m[1], new Map());
      } else if ((m = /^delete table (ip6? \S+)$/.exec(line))) this.nft.delete(m[1]);
      else if ((m = /^flush chain (ip6? \S+) (\S+)$/.exec(line))) this.nft.get(m[1])!.get(m[2])!.comments = [];
      else if ((m = /^delete chain (ip6? \S+) (\S+)$/.exec(line))) this.nft.get(m[1])!.delete(m[2]);
      else if ((m = /^add chain (ip6? \S+) (\S+) \{ type (\S+) hook (\S+) /.exec(line))) this.nft.get(m[1])!.set(m[2], { type: m[3], hook: m[4], comments: [] });
      else if ((m = /^add rule (ip6? \S+) (\S+) .* comment "([^"]+)"$/.exec(line))) this.nft.get(m[1])!.get(m[2])!.comments.push(m[3]);
      else return fail(`nft: cannot model ${line}\n`);
    }
    return ok();
  }
}
