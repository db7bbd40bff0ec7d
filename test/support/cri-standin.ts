// A stand-in container runtime for unit tests: an in-process gRPC server on a
// unix socket answering CRI calls (the proto subset src/runtime embeds) from
// handlers the test gives. The real thing, containerd, is in the integration tests.
import { Server, ServerCredentials, type handleUnaryCall, type ServiceDefinition, type UntypedServiceImplementation } from '@grpc/grpc-js';
import { parse } from 'protobufjs';
import { CRI_PROTO } from '../../src/runtime/cri-api';

/** What the runtime answers to each method: a response object, or an Error with a gRPC `code`. */
export type CriHandlers = Record<string, (req: any) => object>;

const root = parse(CRI_PROTO).root;

/** A gRPC service definition for `service` with `methods` of the embedded proto. */
function definition(service: string, methods: string[]): ServiceDefinition {
  return Object.fromEntries(
    methods.map((m) => {
      const req = root.lookupType(`runtime.v1.${m}Request`);
      const res = root.lookupType(`runtime.v1.${m}Response`);
      return [
        m,
        {
          path: `/${service}/${m}`,
          requestStream: false,
          responseStream: false,
          requestDeserialize: (b: Buffer) => req.toObject(req.decode(b), { longs: String, enums: String, defaults: true }),
          requestSerialize: (v: object) => Buffer.from(req.encode(req.fromObject(v)).finish()),
          responseSerialize: (v: object) => Buffer.from(res.encode(res.fromObject(v)).finish()),
          responseDeserialize: (b: Buffer) => res.decode(b),
        },
      ];
    }),
  ) as ServiceDefinition;
}

/** Serves `handlers` as `service` (runtime.v1's by default) on `socket`; stop it with forceShutdown(). */
export async function serveCri(socket: string, handlers: CriHandlers, service = 'runtime.v1.RuntimeService'): Promise<Server> {
  const server = new Server();
  const impl: UntypedServiceImplementation = Object.fromEntries(
    Object.entries(handlers).map(([m, handler]) => [
      m,
      ((call, done) => {
        const answer = handler(call.request);
        if (answer instanceof Error) done(answer);
        else done(null, answer);
      }) satisfies handleUnaryCall<unknown, object>,
    ]),
  );
  server.addService(definition(service, Object.keys(handlers)), impl);
  await new Promise<void>((res, rej) => server.bindAsync(`unix://${socket}`, ServerCredentials.createInsecure(), (err) => (err ? rej(err) : res())));
  return server;
}
