/** Small shared pieces: sizes and dates as text, a confirmation dialog, jobs started in this tab. */
import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['kB', 'MB', 'GB', 'TB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

export const formatDate = (iso: string) => new Date(iso).toLocaleString();

/** A modal confirmation (a <dialog>, never window.confirm): `onAnswer(true)` on confirm. */
export function Confirm(props: {
  message: string;
  confirmLabel: string;
  onAnswer: (yes: boolean) => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    ref.current?.showModal();
  }, []);
  return (
    <dialog ref={ref} class="confirm" aria-label="Confirm" onClose={() => props.onAnswer(false)}>
      <p>{props.message}</p>
      <div class="row">
        <button type="button" class="danger" onClick={() => props.onAnswer(true)}>
          {props.confirmLabel}
        </button>
        <button type="button" onClick={() => props.onAnswer(false)}>
          Cancel
        </button>
      </div>
    </dialog>
  );
}

/** A modal panel (preview, merge) closed by its button or Escape. */
export function Modal(props: { label: string; onClose: () => void; children: ComponentChildren }) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    ref.current?.showModal();
  }, []);
  return (
    <dialog ref={ref} class="modal" aria-label={props.label} onClose={props.onClose}>
      <div class="modal-head">
        <h2>{props.label}</h2>
        <button type="button" onClick={props.onClose}>
          Close
        </button>
      </div>
      {props.children}
    </dialog>
  );
}

/** Jobs started from this tab (convert, merge, metadata, folder deletes), for the Jobs view. */
export interface TrackedJob {
  jobId: string;
  what: string;
  state: string;
  detail?: string;
}
const jobs: TrackedJob[] = [];
const listeners = new Set<() => void>();
export function trackJob(job: TrackedJob): void {
  const at = jobs.findIndex((j) => j.jobId === job.jobId);
  if (at >= 0) jobs[at] = job;
  else jobs.unshift(job);
  for (const l of listeners) l();
}
export function useJobs(): TrackedJob[] {
  const [, tick] = useState(0);
  useEffect(() => {
    const l = () => tick((n) => n + 1);
    listeners.add(l);
    return () => listeners.delete(l);
  }, []);
  return jobs;
}

/** A status line read by screen readers. */
export function Status(props: { text: string; error?: boolean }) {
  if (!props.text) return null;
  return (
    <p role={props.error ? 'alert' : 'status'} class={props.error ? 'error' : 'status'}>
      {props.text}
    </p>
  );
}

/** Previous/next over a list's keyset cursors (the first page's cursor is `undefined`). */
export function Pager(props: {
  cursors: (string | undefined)[];
  next: string | null | undefined;
  onChange: (cursors: (string | undefined)[]) => void;
}) {
  const { cursors, next, onChange } = props;
  return (
    <div class="pager row">
      <button
        type="button"
        disabled={cursors.length < 2}
        onClick={() => onChange(cursors.slice(0, -1))}
      >
        Previous page
      </button>
      <span>Page {cursors.length}</span>
      <button type="button" disabled={!next} onClick={() => next && onChange([...cursors, next])}>
        Next page
      </button>
    </div>
  );
}
