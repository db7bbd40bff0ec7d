// The policy controller over time, against the stand-in API server and a
// model of the kernel's nftables (test/support/nft-policy-model.ts, behind
// the command runner) and of /proc/sys: nothing written before the three
// lists are in (the table a previous run left stays), then one transaction
// per batch of API changes; a batch the kernel refuses followed by the whole
// table; a table that disappeared written again; /readyz's reasons; the
// series on /metrics.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { setProcSys, setRunner, type ProcSys, type Runner } from '../../../../src/iproute/exec';
import { KubeClient } from '../../../../src/flannel/kube/client';
import { PolicyController } from '../../../../src/flannel/policy/controller';
import { KubeApiServer, startKubeApiServer } from '../../../support/kube-apiserver';
import { NftPolicyModel } from '../../../support/nft-policy-model';
import { waitFor } from '../../../support/wait';

describe('PolicyController', () => {
  let server: KubeApiServer;
  let client: KubeClient;
  let kernel: NftPolicyModel;
  let sysctl: Map<string, string>;
  let scripts: string[];
  let refuseNext: boolean;
  let logs: string[];
  let prevRunner: Runner;
  let prevProcSys: ProcSys;
  let c: PolicyController | undefined;

  const pod = (ns: string, name: string, node: string, ip: string, labels: Record<string, string>) =>
    server.create('pods', {
      metadata: { namespace: ns, name, labels },
      spec: { nodeName: node },
      status: { phase: 'Running', podIPs: [{ ip }] },
    });
  const tcp80 = (saddr: string, daddr: string) => kernel.evaluate({ family: 4, saddr, daddr, protocol: 'tcp', dport: 80 }).verdict;

  beforeEach(async () => {
    server = await startKubeApiServer();
    client = new KubeClient({ server: server.url, description: 'test' });
    kernel = new NftPolicyModel();
    sysctl = new Map([['net/bridge/bridge-nf-call-iptables', '0']]);
    scripts = [];
    refuseNext = false;
    logs = [];
    prevProcSys = setProcSys({ read: (k) => sysctl.get(k), write: (k, v) => void sysctl.set(k, v) });
    prevRunner = setRunner(async (argv, input = '') => {
      const cmd = argv.join(' ');
      if (cmd === 'nft -f -') {
        scripts.push(input);
        if (refuseNext && !input.startsWith('add table')) {
          refuseNext = false;
          return { stdout: '', stderr: 'Error: Could not process rule: No such file or directory\n', code: 1 };
        }
        try {
          kernel.apply(input);
          return { stdout: '', stderr: '', code: 0 };
        } catch (err) {
          return { stdout: '', stderr: `Error: ${(err as Error).message}\n`, code: 1 };
        }
      }
      if (cmd === 'nft -j list counters table inet flannel-netpol') {
        if (!kernel.table) return { stdout: '', stderr: 'Error: No such file or directory\n', code: 1 };
        return {
          stdout: JSON.stringify({ nftables: [{ counter: { name: 'ingress-dropped', packets: 7, bytes: 420 } }] }),
          stderr: '',
          code: 0,
        };
      }
      if (cmd === 'nft list chain inet flannel-netpol forward')
        return kernel.table
          ? { stdout: 'chain forward { type filter hook forward priority filter; }', stderr: '', code: 0 }
          : { stdout: '', stderr: 'Error: No such file or directory', code: 1 };
      throw new Error(`unexpected command ${cmd}`);
    });
    for (const ns of ['x', 'y']) await server.create('namespaces', { metadata: { name: ns } });
    await pod('x', 'a', 'n1', '10.0.1.2', { app: 'a' });
    await pod('y', 'b', 'n2', '10.0.2.2', { app: 'b' });
  });

  afterEach(async () => {
    await c?.stop();
    c = undefined;
    setRunner(prevRunner);
    setProcSys(prevProcSys);
    client.close();
    await server.stop();
  });

  const start = (as: KubeClient = client) => {
    c = new PolicyController({
      client: as,
      nodeName: 'n1',
      families: [4],
      log: (m) => logs.push(m),
      resyncMs: 50,
      backoff: { initialMs: 10, maxMs: 20 },
    });
    c.start();
    return c;
  };

  it('writes nothing until Pods, Namespaces and NetworkPolicies are listed, then the whole table in one transaction; /readyz meanwhile says why', async () => {
    await server.create('networkpolicies', { metadata: { namespace: 'x', name: 'deny' }, spec: { podSelector: {} } });
    // the table an earlier run left: in force until the new one replaces it
    kernel.apply(
      'add table inet flannel-netpol\nadd chain inet flannel-netpol forward { type filter hook forward priority filter; policy accept; }\n',
    );
    await server.setUsers([{ name: 'fl', token: 't', role: 'flannel' }]);
    const denied = new KubeClient({ server: server.url, token: () => 't', description: 'test' });
    const policy = start(denied);
    await waitFor('a 403', () => /not listed yet \(listing .*403/.test(policy.ready() ?? ''));
    expect(scripts).toEqual([]);
    expect(kernel.table?.chains.size).toBe(1); // the old table, untouched
    await server.setUsers([{ name: 'fl', token: 't', role: ['flannel', 'network-policy'] }]);
    await waitFor('ready', () => policy.ready() === undefined);
    expect(scripts).toHaveLength(1);
    expect(scripts[0]).toMatch(/^add table inet flannel-netpol\ndelete table inet flannel-netpol\n/);
    expect(tcp80('10.0.2.2', '10.0.1.2')).toBe('drop');
    expect(sysctl.get('net/bridge/bridge-nf-call-iptables')).toBe('1');
    expect(logs).toContain(
      'network policy: set net.bridge.bridge-nf-call-iptables=1, so that traffic between two pods of this node meets the table',
    );
    await policy.stop();
    c = undefined;
    denied.close();
  });

  it('then one transaction per batch of changes, touching only what they change', async () => {
    start();
    await waitFor('ready', () => c!.ready() === undefined);
    expect(tcp80('10.0.2.2', '10.0.1.2')).toBe('accept');
    await server.create('networkpolicies', {
      metadata: { namespace: 'x', name: 'from-b' },
      spec: { podSelector: {}, ingress: [{ from: [{ namespaceSelector: {}, podSelector: { matchLabels: { app: 'b' } } }] }] },
    });
    await waitFor('the policy enforced', () => scripts.length === 2);
    expect(scripts[1]).not.toMatch(/^add table/);
    expect(tcp80('10.0.2.2', '10.0.1.2')).toBe('accept');
    // the peer relabelled out of the group: one element goes
    await server.patch('pods', 'y/b', { metadata: { labels: { app: 'c' } } });
    await waitFor('the change', () => scripts.length === 3);
    expect(scripts[2]).toMatch(/^delete element inet flannel-netpol p-[0-9a-f]{16}-4 \{ 10\.0\.2\.2 \}\n$/);
    expect(tcp80('10.0.2.2', '10.0.1.2')).toBe('drop');
    // a change policy does not read (a status update): no transaction
    await server.patch('pods', 'y/b', { status: { conditions: [{ type: 'Ready', status: 'True' }] } });
    await server.patch('pods', 'y/b', { metadata: { labels: { app: 'b' } } });
    await waitFor('the next change', () => tcp80('10.0.2.2', '10.0.1.2') === 'accept');
    expect(scripts).toHaveLength(4);
  });

  it('a batch the kernel refuses is followed by the whole table; a table that went is written again', async () => {
    start();
    await waitFor('ready', () => c!.ready() === undefined);
    refuseNext = true;
    await server.create('networkpolicies', { metadata: { namespace: 'x', name: 'deny' }, spec: { podSelector: {} } });
    await waitFor('the whole table', () => scripts.length === 3 && scripts[2].startsWith('add table'));
    expect(
      logs.some(
        (l) => l.startsWith('network policy: cannot write the nftables table inet flannel-netpol: ') && l.endsWith('writing it whole'),
      ),
    ).toBe(true);
    expect(tcp80('10.0.2.2', '10.0.1.2')).toBe('drop');
    const families = c!.metrics.families().join('\n');
    expect(families).toContain('flannel_network_policy_rule_updates_total{kind="changes",result="failed"} 1');
    expect(families).toContain('flannel_network_policy_rule_updates_total{kind="full",result="ok"} 2');
    // someone flushed the ruleset: written again within a resync interval
    kernel.apply('delete table inet flannel-netpol\n');
    await waitFor('the table back', () => !!kernel.table);
    expect(logs).toContain('network policy: the nftables table inet flannel-netpol is gone: writing it again');
    expect(tcp80('10.0.2.2', '10.0.1.2')).toBe('drop');
    await waitFor('the counters read', () =>
      c!.metrics.families().join('\n').includes('flannel_network_policy_dropped_packets_total{direction="ingress"} 7'),
    );
  });

  it('/readyz: a policy it cannot enforce (and when it is fixed), br_netfilter missing', async () => {
    start();
    await waitFor('ready', () => c!.ready() === undefined);
    await server.create('networkpolicies', {
      metadata: { namespace: 'x', name: 'bad' },
      spec: { podSelector: {}, ingress: [{ ports: [{ protocol: 'ICMP' }] }] },
    });
    await waitFor(
      'not ready',
      () => c!.ready() === 'network policy x/bad cannot be enforced (spec.ingress[0].ports[0].protocol "ICMP" is not TCP, UDP or SCTP)',
    );
    await waitFor('x/a closed', () => tcp80('10.0.2.2', '10.0.1.2') === 'drop');
    await server.patch('networkpolicies', 'x/bad', { spec: { ingress: [{ ports: [{ protocol: 'TCP' }] }] } });
    await waitFor('ready again', () => c!.ready() === undefined);
    expect(logs).toContain('network policy x/bad: enforced');
    sysctl.clear(); // br_netfilter unloaded (and modprobe cannot: not in this test's runner)
    await waitFor('not ready', () => /^network policy: br_netfilter is not loaded/.test(c!.ready() ?? ''));
  });
});
