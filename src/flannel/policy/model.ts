// What network policy is made of, once read from the API: the pods and
// namespaces (only what policy reads of them) and the policies, with the
// API's defaulting applied and every value checked (parse.ts makes them).
import type { Family } from '../../net/ip';
import type { Range } from './ranges';
import type { Labels, Selector } from './selector';

export type Protocol = 'tcp' | 'udp' | 'sctp';
export const PROTOCOLS: readonly Protocol[] = ['tcp', 'udp', 'sctp'];

export type Direction = 'ingress' | 'egress';
export const DIRECTIONS: readonly Direction[] = ['ingress', 'egress'];

/** A container port with a name: what a NetworkPolicy port given by name resolves to, on the pod it names. */
export interface NamedPort {
  name: string;
  protocol: Protocol;
  port: number;
}

/** A pod as policy sees it: never a host-network pod, never one that has finished (its addresses are reused). */
export interface PodInfo {
  namespace: string;
  name: string;
  /** spec.nodeName ('' while not scheduled). */
  node: string;
  labels: Labels;
  /** status.podIPs, canonical text; none while Pending. */
  ips: readonly string[];
  /** Container ports that have a name. */
  ports: readonly NamedPort[];
}

export const podKey = (p: { namespace: string; name: string }) => `${p.namespace}/${p.name}`;
export const familyOf = (ip: string): Family => (ip.includes(':') ? 6 : 4);

/** A port of a rule: numbers (a range: `endPort`, or the whole protocol when no port is given), or a container port's name. */
export type PortSpec = { protocol: Protocol; range: Range<number> } | { protocol: Protocol; name: string };

/** A peer of a rule (NetworkPolicyPeer). */
export type Peer =
  | {
      kind: 'pods';
      /** The policy's namespace when there is no namespaceSelector (the peer is in it); undefined otherwise. */
      namespace?: string;
      /** undefined: every pod (only a namespaceSelector was given). */
      podSelector?: Selector;
      namespaceSelector?: Selector;
    }
  | {
      kind: 'block';
      family: Family;
      /** As written (for people). */
      cidr: string;
      except: readonly string[];
      /** cidr without its exceptions. */
      ranges: readonly Range<bigint>[];
    };

/** One ingress (from) or egress (to) rule: peers 'all' when none are listed, ports 'all' when none are. */
export interface Rule {
  peers: 'all' | readonly Peer[];
  ports: 'all' | readonly PortSpec[];
}

export interface Policy {
  namespace: string;
  name: string;
  /** Which pods of its namespace it applies to; undefined: it cannot be read, so (failing closed) all of them. */
  podSelector?: Selector;
  /** Present for each direction the policy isolates (its policyTypes, defaulted as the API does). */
  ingress?: readonly Rule[];
  egress?: readonly Rule[];
  /**
   * Why it cannot be enforced exactly (a field this daemon does not know, a
   * bad CIDR...): it then allows nothing but still isolates the pods it
   * selects in its directions, so that nothing is opened that it did not
   * open. Reported in the log, /readyz and /metrics.
   */
  problem?: string;
}
