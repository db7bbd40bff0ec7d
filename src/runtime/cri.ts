// A client for a container runtime's CRI (runtime.v1, the kubelet's API;
// containerd and CRI-O serve it): gRPC over the runtime's unix socket.
//
// The one rule that matters to callers: a runtime that does not answer is an
// error naming the endpoint, never an empty answer. A dead runtime's "no
// pods" would read as "every attachment on this node is garbage".
import { Client, credentials, status, type ServiceError } from '@grpc/grpc-js';
import { parse, type IConversionOptions, type Root } from 'protobufjs';
import { CRI_PROTO } from './cri-api';

export interface RuntimeVersion {
  /** The kubelet API version the runtime answers ("0.1.0"); runtimeApiVersion is the CRI version ("v1"). */
  version: string;
  runtimeName: string;
  runtimeVersion: string;
  runtimeApiVersion: string;
}

/** A pod sandbox as the runtime lists it; `id` is the CNI container ID of its attachments. */
export interface PodSandbox {
  id: string;
  name: string;
  namespace: string;
  uid: string;
  attempt: number;
  /** SANDBOX_READY; anything else (stopped, not yet set up) is false. */
  ready: boolean;
  createdAt: Date;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  runtimeHandler: string;
}

export interface PodSandboxStatus extends PodSandbox {
  /** The pod's IPs as the runtime reports them (its CNI result): the primary first. */
  ips: string[];
  /** Runtime-specific details, filled only on a verbose request (containerd: JSON with the runtime spec). */
  info: Record<string, string>;
}

export interface PodSandboxConfig {
  name: string;
  namespace: string;
  uid: string;
  attempt?: number;
  hostname?: string;
  logDirectory?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/**
 * A failed CRI call. `unavailable` is true when the runtime did not answer at
 * all (no socket, refused, timed out, or not a runtime.v1 CRI server), false
 * when it answered with an error (e.g. an unknown sandbox id).
 */
export class CriError extends Error {
  constructor(
    message: string,
    readonly endpoint: string,
    readonly unavailable: boolean,
    readonly grpcCode: number,
  ) {
    super(message);
    this.name = 'CriError';
  }
}

const SERVICE = '/runtime.v1.RuntimeService/';
const DECODE: IConversionOptions = { longs: String, enums: String, defaults: true, arrays: true, objects: true };
const DEFAULT_TIMEOUT_MS = 10_000;
/** What the kubelet sends in VersionRequest (kuberuntime's kubeRuntimeAPIVersion). */
const KUBELET_API_VERSION = '0.1.0';

let protoRoot: Root | undefined;
const messages = () => (protoRoot ??= parse(CRI_PROTO).root);

type Fields = Record<string, any>;

/**
 * The socket path of a CRI endpoint as the kubelet and crictl write it:
 * `unix:///path/to.sock`, or a bare absolute path (the kubelet's fallback).
 */
function socketPath(endpoint: string): string {
  const path = endpoint.startsWith('unix://') ? endpoint.slice('unix://'.length) : endpoint;
  if (!path.startsWith('/')) {
    throw new Error(`runtime endpoint ${JSON.stringify(endpoint)} is not supported: expected unix:///path/to.sock or an absolute socket path`);
  }
  return path;
}

export class CriClient {
  private readonly client: Client;
  private readonly timeoutMs: number;

  constructor(
    readonly endpoint: string,
    options: { timeoutMs?: number } = {},
  ) {
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.client = new Client(`unix://${socketPath(endpoint)}`, credentials.createInsecure());
  }

  /** Closes the connection (an open client keeps the process alive). */
  close(): void {
    this.client.close();
  }

  async version(): Promise<RuntimeVersion> {
    const r = await this.call('Version', { version: KUBELET_API_VERSION });
    return { version: r.version, runtimeName: r.runtimeName, runtimeVersion: r.runtimeVersion, runtimeApiVersion: r.runtimeApiVersion };
  }

  /** Every pod sandbox the runtime knows, in all states. */
  async listPodSandboxes(): Promise<PodSandbox[]> {
    const r = await this.call('ListPodSandbox', {});
    return (r.items as Fields[]).map(toSandbox);
  }

  async podSandboxStatus(id: string, options: { verbose?: boolean } = {}): Promise<PodSandboxStatus> {
    const r = await this.call('PodSandboxStatus', { podSandboxId: id, verbose: options.verbose ?? false });
    const s = r.status as Fields;
    const net = (s.network ?? { ip: '', additionalIps: [] }) as Fields;
    const ips = [net.ip as string, ...(net.additionalIps as Fields[]).map((p) => p.ip as string)].filter(Boolean);
    return { ...toSandbox(s), ips, info: r.info };
  }

  /** Creates and starts a pod sandbox (the runtime runs CNI ADD); returns its id. */
  async runPodSandbox(config: PodSandboxConfig, runtimeHandler = ''): Promise<string> {
    const { name, namespace, uid, attempt = 0, hostname = '', logDirectory = '', labels = {}, annotations = {} } = config;
    const r = await this.call('RunPodSandbox', {
      config: { metadata: { name, namespace, uid, attempt }, hostname, logDirectory, labels, annotations },
      runtimeHandler,
    });
    return r.podSandboxId;
  }

  /** Stops a sandbox (the runtime runs CNI DEL). */
  async stopPodSandbox(id: string): Promise<void> {
    await this.call('StopPodSandbox', { podSandboxId: id });
  }

  async removePodSandbox(id: string): Promise<void> {
    await this.call('RemovePodSandbox', { podSandboxId: id });
  }

  private call(method: string, request: Fields): Promise<Fields> {
    const req = messages().lookupType(`runtime.v1.${method}Request`);
    const res = messages().lookupType(`runtime.v1.${method}Response`);
    return new Promise((resolve, reject) => {
      this.client.makeUnaryRequest<Fields, Fields>(
        SERVICE + method,
        (value) => Buffer.from(req.encode(req.fromObject(value)).finish()),
        (bytes) => res.toObject(res.decode(bytes), DECODE),
        request,
        { deadline: Date.now() + this.timeoutMs },
        (err, value) => (err ? reject(this.failure(method, err)) : resolve(value!)),
      );
    });
  }

  private failure(method: string, err: ServiceError): CriError {
    const at = `container runtime at ${this.endpoint}`;
    // grpc-js appends an empty "Resolution note: " to connection errors
    const why = (err.details || err.message).replace(/\s*Resolution note:\s*$/, '');
    switch (err.code) {
      case status.UNAVAILABLE:
        return new CriError(`${at} does not answer (${method}: ${why})`, this.endpoint, true, err.code);
      case status.DEADLINE_EXCEEDED:
        return new CriError(`${at} did not answer ${method} within ${this.timeoutMs / 1000} s`, this.endpoint, true, err.code);
      case status.UNIMPLEMENTED:
        return new CriError(`${this.endpoint} does not serve the CRI runtime.v1 RuntimeService (${method}: ${why})`, this.endpoint, true, err.code);
      default:
        return new CriError(`${at}: ${method} failed: ${why}`, this.endpoint, false, err.code);
    }
  }
}

function toSandbox(s: Fields): PodSandbox {
  const meta = (s.metadata ?? {}) as Fields;
  return {
    id: s.id,
    name: meta.name ?? '',
    namespace: meta.namespace ?? '',
    uid: meta.uid ?? '',
    attempt: meta.attempt ?? 0,
    ready: s.state === 'SANDBOX_READY',
    createdAt: new Date(Number(BigInt(s.createdAt) / 1_000_000n)),
    labels: s.labels,
    annotations: s.annotations,
    runtimeHandler: s.runtimeHandler,
  };
}
