// The package's entry point: a private OpenStack Swift with its s3api
// middleware, started from Debian's packages in a temporary directory, as an
// S3 endpoint for tests where no Docker engine and no MinIO binary are at hand
// (src/swift.ts). src/check.ts runs the S3 operations the service uses against it.
export { startSwift, swiftAvailable, type S3Backend, type StartSwiftOptions } from './swift';
