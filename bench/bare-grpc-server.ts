/**
 * Child entry of the benches' bare gRPC server (bench/lib/bare-grpc.ts): `node bare-grpc-server.js
 * <codec|bytes>`, forked by `startBareGrpcServer`.
 */
import { GRPC_FORMS, type GrpcForm, serveBareGrpc } from './lib/bare-grpc.js';

const form = process.argv[2] as GrpcForm;
if (!GRPC_FORMS.includes(form)) throw new Error(`bare-grpc-server: form must be codec or bytes, got ${form}`);
serveBareGrpc(form);
