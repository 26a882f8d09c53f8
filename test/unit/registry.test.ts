import { JOB_NAMES } from '../../shared/jobs';
import { PROCESSORS } from '../../worker/processors';
import { buildRegistry, RegistryError, type AnyProcessor } from '../../worker/registry';

describe('the worker job registry', () => {
  it('has exactly one processor for every job name', () => {
    const registry = buildRegistry(PROCESSORS);
    expect([...registry.keys()].sort()).toEqual([...JOB_NAMES].sort());
  });

  it('refuses to start when a job has no processor', () => {
    const withoutMerge = PROCESSORS.filter((p) => p.name !== 'pdf.merge');
    expect(() => buildRegistry(withoutMerge)).toThrow(RegistryError);
    expect(() => buildRegistry(withoutMerge)).toThrow('job "pdf.merge" has no processor');
  });

  it('refuses to start when a job has two processors', () => {
    expect(() => buildRegistry([...PROCESSORS, PROCESSORS[0]!])).toThrow(/has two processors/);
  });

  it('refuses a processor for a job that does not exist', () => {
    const stray = { ...PROCESSORS[0]!, name: 'video.transcode' } as unknown as AnyProcessor;
    expect(() => buildRegistry([...PROCESSORS, stray])).toThrow(/unknown job "video.transcode"/);
  });
});
