/**
 * Part buffers for the S3 store's streaming multipart uploads, reused across
 * uploads: a large upload holds at most `queueSize + 1` of them (the parts
 * uploading and the one filling), so memory per upload is fixed and does not
 * wait for the garbage collector.
 */
export class BufferPool {
  private readonly free: Buffer[] = [];

  constructor(
    readonly size: number,
    private readonly keep: number,
  ) {}

  acquire(): Buffer {
    return this.free.pop() ?? Buffer.allocUnsafeSlow(this.size);
  }

  release(buffer: Buffer): void {
    if (this.free.length < this.keep && buffer.length === this.size) this.free.push(buffer);
  }
}
