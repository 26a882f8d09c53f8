/**
 * The trash (GET /media/trash, newest first, a server page at a time):
 * restore a file to its folder, or delete it for good (after a confirmation).
 * Restore and purge need the `delete` scope; without it the view only lists.
 */
import { useCallback, useEffect, useState } from 'preact/hooks';
import { api, problem, type Abilities } from './api';
import type { components } from './generated/openapi';
import { Confirm, formatBytes, formatDate, Status, Pager } from './ui';

type Trashed = components['schemas']['TrashedRecord'];

export function TrashView({ can }: { can: Abilities }) {
  const [cursors, setCursors] = useState<(string | undefined)[]>([undefined]);
  const [page, setPage] = useState<{ media: Trashed[]; next: string | null }>({
    media: [],
    next: null,
  });
  const [status, setStatus] = useState({ text: '', error: false });
  const [purging, setPurging] = useState<Trashed | null>(null);
  const cursor = cursors[cursors.length - 1];

  const load = useCallback(async () => {
    const { data, error, response } = await api.GET('/media/trash', {
      params: { query: { limit: '50', ...(cursor ? { cursor } : {}) } },
    });
    if (data) setPage({ media: data.data.media, next: data.data.nextCursor });
    else setStatus({ text: problem(error, response), error: true });
  }, [cursor]);
  useEffect(() => {
    void load();
  }, [load]);

  const restore = async (m: Trashed) => {
    const { error, response } = await api.POST('/media/trash/{id}/restore', {
      params: { path: { id: String(m.id) } },
    });
    setStatus(
      error
        ? { text: `Not restored: ${problem(error, response)}`, error: true }
        : { text: `${m.name} restored`, error: false },
    );
    await load();
  };

  const purge = async (m: Trashed) => {
    const { error, response } = await api.DELETE('/media/trash/{id}', {
      params: { path: { id: String(m.id) } },
    });
    setStatus(
      error
        ? { text: `Not deleted: ${problem(error, response)}`, error: true }
        : { text: `${m.name} deleted for good`, error: false },
    );
    await load();
  };

  return (
    <section aria-labelledby="trash-title">
      <h2 id="trash-title">Trash</h2>
      <p>Deleted files stay here until their purge time; restoring puts one back in its folder.</p>
      <Status {...status} />
      <table class="list" aria-label="Trash">
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Size</th>
            <th scope="col">Type</th>
            <th scope="col">Deleted</th>
            <th scope="col">Purged after</th>
            {can.delete && <th scope="col">Actions</th>}
          </tr>
        </thead>
        <tbody>
          {page.media.map((m) => (
            <tr key={m.id} data-key={m.key}>
              <td class="name">{m.name}</td>
              <td>{formatBytes(m.bytes)}</td>
              <td>{m.mimetype}</td>
              <td>{formatDate(m.deletedAt)}</td>
              <td>{formatDate(m.purgeAt)}</td>
              {can.delete && (
                <td class="row">
                  <button type="button" onClick={() => void restore(m)}>
                    Restore <span class="sr-only">{m.name}</span>
                  </button>
                  <button type="button" class="danger" onClick={() => setPurging(m)}>
                    Delete forever <span class="sr-only">{m.name}</span>
                  </button>
                </td>
              )}
            </tr>
          ))}
        </tbody>
      </table>
      {page.media.length === 0 && <p>The trash is empty.</p>}
      <Pager cursors={cursors} next={page.next} onChange={setCursors} />
      {purging && (
        <Confirm
          message={`Delete ${purging.name} for good? It cannot be restored afterwards.`}
          confirmLabel="Delete forever"
          onAnswer={(yes) => {
            const m = purging;
            setPurging(null);
            if (yes) void purge(m);
          }}
        />
      )}
    </section>
  );
}
