// The stand-in's collections on disk: one SQLite file (node:sqlite, built into
// Node 24) in write-ahead-log mode, holding each collection's definition
// (options and index specs) and each document as BSON, keyed by
// (database, collection, canonical _id). At start every collection is loaded
// back into the in-memory engine (storage-engine.ts); after each command the
// changes it made (the engine's journal) are written in one transaction, before
// its reply is sent. A process killed at any moment (kill -9) leaves the file
// as of the last committed command: at most the write in flight is lost, never
// the store. SQLite is used rather than a hand-written log because it gives
// atomic commits and recovery of a torn write for free.

import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync, type StatementSync } from 'node:sqlite';

import { BSON } from 'bson';

import type { Doc } from './bson-values';
import type { JournalEntry, StorageEngine } from './storage-engine';

/** The file under the data directory. */
export const STORE_FILE = 'standin.sqlite';

/** As the wire protocol reads documents: numbers keep their BSON types. */
const TYPED = {
  promoteValues: false,
  promoteLongs: false,
  promoteBuffers: false,
  bsonRegExp: false,
  useBigInt64: false,
} as const;

const encode = (doc: Doc): Uint8Array => BSON.serialize(doc, { ignoreUndefined: true });
const decode = (bytes: Uint8Array): Doc => BSON.deserialize(bytes, TYPED);

export interface LoadReport {
  collections: number;
  documents: number;
}

export class Persistence {
  private readonly db: DatabaseSync;
  private readonly upsertDoc: StatementSync;
  private readonly deleteDoc: StatementSync;
  private readonly upsertCollection: StatementSync;
  private readonly deleteCollection: StatementSync;
  private readonly deleteCollectionDocs: StatementSync;
  private readonly deleteDatabase: StatementSync;
  private readonly deleteDatabaseDocs: StatementSync;

  constructor(readonly dir: string) {
    mkdirSync(dir, { recursive: true });
    this.db = new DatabaseSync(join(dir, STORE_FILE));
    // WAL: a commit is one append to the log; synchronous=NORMAL does not
    // fsync each commit, which a killed process does not need (the OS keeps
    // what was written), only a power cut would.
    this.db.exec(`
      PRAGMA journal_mode = WAL;
      PRAGMA synchronous = NORMAL;
      CREATE TABLE IF NOT EXISTS collections (
        db TEXT NOT NULL, name TEXT NOT NULL, options BLOB NOT NULL, indexes BLOB NOT NULL,
        PRIMARY KEY (db, name)
      );
      CREATE TABLE IF NOT EXISTS documents (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        db TEXT NOT NULL, coll TEXT NOT NULL, id_key TEXT NOT NULL, doc BLOB NOT NULL,
        UNIQUE (db, coll, id_key)
      );
    `);
    // An update keeps the row (and so its seq: the collection's insertion order).
    this.upsertDoc = this.db.prepare(
      `INSERT INTO documents (db, coll, id_key, doc) VALUES (?, ?, ?, ?)
       ON CONFLICT (db, coll, id_key) DO UPDATE SET doc = excluded.doc`,
    );
    this.deleteDoc = this.db.prepare(
      'DELETE FROM documents WHERE db = ? AND coll = ? AND id_key = ?',
    );
    this.upsertCollection = this.db.prepare(
      `INSERT INTO collections (db, name, options, indexes) VALUES (?, ?, ?, ?)
       ON CONFLICT (db, name) DO UPDATE SET options = excluded.options, indexes = excluded.indexes`,
    );
    this.deleteCollection = this.db.prepare('DELETE FROM collections WHERE db = ? AND name = ?');
    this.deleteCollectionDocs = this.db.prepare('DELETE FROM documents WHERE db = ? AND coll = ?');
    this.deleteDatabase = this.db.prepare('DELETE FROM collections WHERE db = ?');
    this.deleteDatabaseDocs = this.db.prepare('DELETE FROM documents WHERE db = ?');
  }

  /** Loads every stored collection into `engine` (empty at this point). */
  load(engine: StorageEngine): LoadReport {
    const report: LoadReport = { collections: 0, documents: 0 };
    const collections = this.db
      .prepare('SELECT db, name, options, indexes FROM collections ORDER BY rowid')
      .all() as { db: string; name: string; options: Uint8Array; indexes: Uint8Array }[];
    const docs = this.db.prepare(
      'SELECT doc FROM documents WHERE db = ? AND coll = ? ORDER BY seq',
    );
    for (const row of collections) {
      const store = engine.createCollection(row.db, row.name, decode(row.options));
      // Documents first, then the indexes (a unique one is built over them, as a restore does).
      for (const doc of docs.iterate(row.db, row.name) as Iterable<{ doc: Uint8Array }>) {
        store.insert(decode(doc.doc));
        report.documents++;
      }
      const { specs } = decode(row.indexes) as { specs: Doc[] };
      for (const spec of specs) if (spec.name !== '_id_') store.createIndex(spec);
      report.collections++;
    }
    // What loading did is on disk already; from now on every change is noted.
    engine.takeJournal();
    engine.journaling = true;
    return report;
  }

  /** Writes what changed since the last call, in one transaction. */
  flush(engine: StorageEngine): void {
    const journal = engine.takeJournal();
    if (journal.length === 0) return;
    this.db.exec('BEGIN');
    try {
      this.apply(engine, journal);
      this.db.exec('COMMIT');
    } catch (error) {
      this.db.exec('ROLLBACK');
      throw error;
    }
  }

  private apply(engine: StorageEngine, journal: JournalEntry[]): void {
    const written = new Set<string>();
    for (const entry of journal) {
      switch (entry.kind) {
        case 'dropDatabase':
          this.deleteDatabase.run(entry.db);
          this.deleteDatabaseDocs.run(entry.db);
          written.clear();
          break;
        case 'dropCollection':
          this.deleteCollection.run(entry.db, entry.name);
          this.deleteCollectionDocs.run(entry.db, entry.name);
          written.clear();
          break;
        case 'definition': {
          const { store } = entry;
          // A collection dropped later in the same command is not written back.
          if (engine.collection(store.db, store.name) !== store) break;
          this.upsertCollection.run(
            store.db,
            store.name,
            encode(store.options),
            encode({ specs: store.indexSpecs() }),
          );
          break;
        }
        case 'document': {
          const { store, idKey } = entry;
          if (engine.collection(store.db, store.name) !== store) break;
          const seen = `${store.db}\0${store.name}\0${idKey}`;
          if (written.has(seen)) break;
          written.add(seen);
          // The document as it is now (its last version in this command), or its removal.
          const current = store.get(idKey);
          if (current) this.upsertDoc.run(store.db, store.name, idKey, encode(current.doc));
          else this.deleteDoc.run(store.db, store.name, idKey);
          break;
        }
      }
    }
  }

  close(): void {
    if (this.db.isOpen) this.db.close();
  }
}
