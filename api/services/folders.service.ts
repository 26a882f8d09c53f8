/**
 * Folders as requests name them: `folder` (a name) finds or creates the
 * organization's folder of that name, `folderId` must name one of its
 * folders (404 otherwise), and both given must agree (400 otherwise).
 */
import { Errors } from '@shared/errors';
import type { Folder, FoldersRepository } from '@shared/repositories/folders.repository';
import type { Organization } from '@shared/repositories/organizations.repository';

/** `folder` (a name) and/or `folderId` as they came in the request. */
export interface FolderSpec {
  folder?: string | undefined;
  folderId?: string | undefined;
}

export class FoldersService {
  constructor(private readonly deps: { folders: FoldersRepository }) {}

  /** Validates and resolves a folder spec: a name finds or creates, an id must exist; both must agree. */
  async resolve(org: Organization, spec: FolderSpec): Promise<Folder | null> {
    const name = spec.folder?.trim();
    const rawId = spec.folderId?.trim();
    let byId: Folder | null = null;
    if (rawId !== undefined && rawId !== '') {
      if (!/^[1-9]\d{0,14}$/.test(rawId)) {
        throw Errors.validation([
          { field: 'folderId', message: 'folderId must be a positive integer' },
        ]);
      }
      byId = await this.deps.folders.findById(org.id, Number(rawId));
      if (!byId) throw Errors.folderNotFound(rawId);
    }
    if (name !== undefined && name !== '') {
      if (name.length > 200) {
        throw Errors.validation([
          { field: 'folder', message: 'folder must be at most 200 characters' },
        ]);
      }
      if (byId) {
        if (byId.name !== name) throw Errors.folderMismatch(name, byId.id);
        return byId;
      }
      return this.deps.folders.findOrCreate(org.id, name);
    }
    return byId;
  }
}
