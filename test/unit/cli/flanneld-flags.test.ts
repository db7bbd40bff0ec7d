// `vxlan-flannel daemon`'s command line as flanneld's: Go's boolean flags,
// repeatable flags, FLANNELD_<FLAG> variables (the command line winning, an
// empty variable unset), and what the flags become for the daemon. The
// daemon itself is replaced by a recorder: these tests look at its options.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Command } from 'commander';
import { boolOption, collect, envName, optionsFromEnv, parseGoBool } from '../../../src/cli/flanneld-flags';
import type { RunOptions } from '../../../src/flannel/daemon/run-daemon';

const runs: RunOptions[] = [];
vi.mock('../../../src/flannel/daemon/run-daemon', () => ({
  runDaemon: async (o: RunOptions) => {
    runs.push(o);
    return 0;
  },
}));

describe('flanneld\'s flag conventions (src/cli/flanneld-flags.ts)', () => {
  /** A command with one flag of each kind; returns its options after parsing `args` with `env`. */
  const parse = (args: string[], env: NodeJS.ProcessEnv = {}) => {
    const cmd = new Command('t')
      .exitOverride()
      .configureOutput({ writeErr: () => {} })
      .option('--iface <x>', '', collect)
      .option('--resync <n>', '', (v: string) => {
        if (!/^\d+$/.test(v)) throw new Error('--resync must be a number');
        return Number(v);
      }, 5)
      .addOption(boolOption('--ip-masq', '', false))
      .addOption(boolOption('--forward', '', true))
      .option('--plain', 'a commander boolean')
      .option('--name <x>', '', 'default');
    cmd.hook('preAction', (c) => optionsFromEnv(c, 'FLANNELD', env)).action(() => {});
    cmd.parse(['node', 't', ...args]);
    return cmd.opts();
  };

  it('Go booleans: --flag, --flag=true|false (every spelling strconv.ParseBool takes), defaults kept', () => {
    expect(parse([])).toMatchObject({ ipMasq: false, forward: true, resync: 5, name: 'default' });
    expect(parse(['--ip-masq', '--forward=false'])).toMatchObject({ ipMasq: true, forward: false });
    for (const t of ['1', 't', 'T', 'TRUE', 'true', 'True']) expect(parseGoBool('--x')(t)).toBe(true);
    for (const f of ['0', 'f', 'F', 'FALSE', 'false', 'False']) expect(parseGoBool('--x')(f)).toBe(false);
    expect(() => parse(['--forward=no'])).toThrow('--forward must be true or false, got "no"');
  });

  it('a repeatable flag keeps every value in order', () => {
    expect(parse(['--iface', 'eth1', '--iface=10.0.0.1']).iface).toEqual(['eth1', '10.0.0.1']);
    expect(parse([]).iface).toBeUndefined();
  });

  it('FLANNELD_<FLAG>: upper case, dashes to underscores; through the flag\'s own parser; the command line wins; empty is unset', () => {
    expect(envName('FLANNELD', '--iface-can-reach')).toBe('FLANNELD_IFACE_CAN_REACH');
    const env = { FLANNELD_IFACE: 'eth1', FLANNELD_RESYNC: '9', FLANNELD_IP_MASQ: 'true', FLANNELD_FORWARD: 'false', FLANNELD_PLAIN: 'false', FLANNELD_NAME: '' };
    expect(parse([], env)).toMatchObject({ iface: ['eth1'], resync: 9, ipMasq: true, forward: false, plain: false, name: 'default' });
    expect(parse(['--iface', 'eth2', '--resync', '3', '--ip-masq=false'], env)).toMatchObject({ iface: ['eth2'], resync: 3, ipMasq: false, forward: false });
    expect(parse([], { FLANNELD_PLAIN: 'T' }).plain).toBe(true);
  });

  it('a bad value in a variable is an error naming the variable', () => {
    expect(() => parse([], { FLANNELD_RESYNC: 'often' })).toThrow('FLANNELD_RESYNC: --resync must be a number');
    expect(() => parse([], { FLANNELD_IP_MASQ: 'yes' })).toThrow('FLANNELD_IP_MASQ: --ip-masq must be true or false, got "yes"');
  });
});

describe('vxlan-flannel daemon: the flags as the daemon gets them', () => {
  let saved: NodeJS.ProcessEnv;
  let err: string;
  beforeEach(() => {
    saved = { ...process.env };
    for (const k of Object.keys(process.env)) if (k.startsWith('FLANNELD_')) delete process.env[k];
    runs.length = 0;
    err = '';
    vi.spyOn(process, 'exit').mockImplementation((() => undefined) as never);
    vi.spyOn(process.stderr, 'write').mockImplementation((s) => ((err += String(s)), true));
  });
  afterEach(() => {
    process.env = saved;
    process.exitCode = undefined;
    vi.restoreAllMocks();
  });
  const daemon = async (...args: string[]): Promise<RunOptions> => {
    const { main } = await import('../../../src/cli/vxlan-flannel');
    await main(['node', 'vxlan-flannel', 'daemon', ...args]);
    expect(err).toBe('');
    expect(runs).toHaveLength(1);
    return runs[0];
  };

  it('flanneld\'s defaults: no masquerade, forward rules, a 5 s resync, fully random, no health server, an hour\'s renew margin', async () => {
    const o = await daemon();
    expect(o.traffic).toEqual({ ipMasq: false, randomFully: true, forwardRules: true, resyncMs: 5000 });
    expect(o.healthz).toBeUndefined();
    expect(o.renewMarginS).toBe(3600);
    expect([o.iface, o.ifaceRegex, o.ifaceCanReach]).toEqual([undefined, undefined, undefined]);
  });

  it('kube-flannel\'s and flanneld\'s spellings', async () => {
    const o = await daemon(
      '--ip-masq', '--iface', 'eth1', '--iface=192.168.1.5', '--iface-regex', '^en', '--iface-can-reach', '192.168.1.1',
      '--iptables-forward-rules=false', '--ip-masq-fully-random-disable', '--iptables-resync=2', '--healthz-port=8081',
      '--subnet-lease-renew-margin', '30',
    );
    expect(o.traffic).toEqual({ ipMasq: true, randomFully: false, forwardRules: false, resyncMs: 2000 });
    expect([o.iface, o.ifaceRegex, o.ifaceCanReach]).toEqual([['eth1', '192.168.1.5'], ['^en'], '192.168.1.1']);
    expect(o.healthz).toEqual({ ip: '0.0.0.0', port: 8081 });
    expect(o.renewMarginS).toBe(1800);
  });

  it('every flag from FLANNELD_<FLAG>, ours too; the command line wins', async () => {
    Object.assign(process.env, {
      FLANNELD_IFACE: 'eth0',
      FLANNELD_IP_MASQ: 'true',
      FLANNELD_HEALTHZ_IP: '127.0.0.1',
      FLANNELD_HEALTHZ_PORT: '8081',
      FLANNELD_ETCD_ENDPOINTS: 'http://10.0.0.1:2379',
      FLANNELD_RELEASE_ON_EXIT: 'true',
      FLANNELD_IPTABLES_RESYNC: '7',
    });
    const o = await daemon('--iptables-resync', '3');
    expect(o.iface).toEqual(['eth0']);
    expect(o.traffic).toMatchObject({ ipMasq: true, resyncMs: 3000 });
    expect(o.healthz).toEqual({ ip: '127.0.0.1', port: 8081 });
    expect(o.store.etcdEndpoints).toEqual(['http://10.0.0.1:2379']);
    expect(o.releaseOnExit).toBe(true);
  });

  it('bad values are refused naming the flag or the variable, and the daemon does not run', async () => {
    const { main } = await import('../../../src/cli/vxlan-flannel');
    process.env.FLANNELD_HEALTHZ_PORT = '99999';
    await main(['node', 'vxlan-flannel', 'daemon']);
    expect(err).toBe('vxlan-flannel: FLANNELD_HEALTHZ_PORT: --healthz-port must be an integer from 0 to 65535\n');
    delete process.env.FLANNELD_HEALTHZ_PORT;
    err = '';
    await main(['node', 'vxlan-flannel', 'daemon', '--iface-can-reach', 'gateway']);
    expect(err).toMatch(/--iface-can-reach must be an IPv4 or IPv6 address/);
    expect(runs).toEqual([]);
  });

  it('klog\'s -v as flanneld takes it (-v=2, --v=2, -v 2, FLANNELD_V) is the log detail, capped at 2; without it 0', async () => {
    expect((await daemon()).logDetail).toBe(0);
    for (const args of [['-v=2'], ['--v=2'], ['-v', '2'], ['--v', '2'], ['-v=9']]) {
      runs.length = 0;
      expect((await daemon(...args)).logDetail, args.join(' ')).toBe(2);
    }
    runs.length = 0;
    process.env.FLANNELD_V = '1';
    expect((await daemon()).logDetail).toBe(1);
  });

  it('Go\'s single-dash long flags; a value that starts with "-" stays the value', async () => {
    const o = await daemon('-etcd-endpoints=http://10.0.0.1:2379', '-ip-masq', '-iface-regex', '-x$', '-healthz-port', '8081');
    expect(o.store.etcdEndpoints).toEqual(['http://10.0.0.1:2379']);
    expect(o.traffic.ipMasq).toBe(true);
    expect(o.ifaceRegex).toEqual(['-x$']);
    expect(o.healthz?.port).toBe(8081);
  });

  it('the other klog flags are accepted, each that changes nothing noted once for the log; --skip_headers drops the time', async () => {
    const o = await daemon('--logtostderr', '--log_dir=/var/log/flannel', '-vmodule=main=3,kube=2', '--alsologtostderr=false', '--skip_headers', '-stderrthreshold=ERROR');
    expect(o.skipHeaders).toBe(true);
    expect(o.notes).toEqual([
      '--vmodule=main=3,kube=2: accepted as klog\'s flag, no effect: per-file verbosity; -v sets the whole daemon\'s',
      '--logtostderr=true: accepted as klog\'s flag, no effect: logs always go to stderr',
      '--alsologtostderr=false: accepted as klog\'s flag, no effect: logs always go to stderr',
      '--log_dir=/var/log/flannel: accepted as klog\'s flag, no effect: no log files are written: logs go to stderr (journald, the kubelet keep them)',
      '--stderrthreshold=ERROR: accepted as klog\'s flag, no effect: every line goes to stderr',
    ]);
    runs.length = 0;
    expect((await daemon()).notes).toEqual([]);
  });

  it('bad klog values are refused naming the flag; -v is not the version anywhere, --version is', async () => {
    const { main } = await import('../../../src/cli/vxlan-flannel');
    await main(['node', 'vxlan-flannel', 'daemon', '-v=lots']);
    expect(err).toMatch(/--v must be an integer \(klog's verbosity\), got "lots"/);
    err = '';
    await main(['node', 'vxlan-flannel', 'daemon', '--vmodule=main']);
    expect(err).toMatch(/--vmodule must be pattern=N/);
    err = '';
    await main(['node', 'vxlan-flannel', '-v']);
    expect(err).toMatch(/unknown option '-v'/);
    expect(runs).toEqual([]);
    let out = '';
    vi.spyOn(process.stdout, 'write').mockImplementation((s) => ((out += String(s)), true));
    await main(['node', 'vxlan-flannel', '--version']);
    expect(out).toMatch(/^(\d+\.\d+\.\d+|dev)\n$/);
  });
});
