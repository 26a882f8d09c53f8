/**
 * The page tree: found from the catalog, walked iteratively within limits
 * (page budget, depth, cycles, /Parent chains) before pdf-lib's own recursive
 * traversal ever runs, and rebuilt from the surviving page objects when a
 * damaged file lost it.
 */
import {
  PDFArray,
  PDFDict,
  PDFName,
  PDFNumber,
  PDFPageLeaf,
  PDFPageTree,
  type PDFDocument,
  type PDFObject,
  type PDFRef,
} from 'pdf-lib';
import { Refusal } from './refusals';

/**
 * Deepest page tree accepted (root = depth 1). Real files stay under ten levels;
 * pdf-lib's traversal is recursive and overflows the stack near 10,000.
 */
export const MAX_PAGE_TREE_DEPTH = 256;

/**
 * The page size given to a recovered page that has no usable /MediaBox of its
 * own (it was inherited from the lost page-tree root): A4 in points, the size
 * pdf-lib itself gives a new page and the most common paper size worldwide.
 */
export const RECOVERED_PAGE_MEDIA_BOX: readonly number[] = [0, 0, 595.28, 841.89];

/**
 * The catalog's /Pages, or `undefined` when there is none to walk: the entry is
 * missing, null, or points at an object that is lost or not a dictionary. A
 * dictionary that is not a page tree node is returned as is (the walk fails on
 * it, as pdf-lib would).
 */
export function pageTreeRoot(doc: PDFDocument): PDFPageTree | undefined {
  const entry = doc.catalog.get(PDFName.of('Pages'));
  const root = entry === undefined ? undefined : doc.context.lookup(entry);
  return root instanceof PDFDict ? (root as PDFPageTree) : undefined;
}

/**
 * Counts the pages the way pdf-lib's `PDFPageTree.traverse` finds them, but
 * iteratively and within limits, so that pdf-lib's recursive traversal (and the
 * recursive `/Parent` ascent it does when copying) only ever runs on trees known
 * to be shallow, acyclic and within the page budget.
 */
export function walkPageTree(doc: PDFDocument, root: PDFPageTree, pageBudget: number): number {
  const context = doc.context;
  const parentsChecked = new Set<PDFObject>();
  // Internal nodes a tree needs are fewer than its leaves; shared subtrees are
  // counted each time they are reached, so this also bounds a DAG's blow-up.
  const maxVisits = 2 * Math.max(pageBudget, 0) + 1_024;

  let pages = 0;
  let visits = 0;
  const stack: { node: PDFPageTree; kids: PDFArray; next: number }[] = [
    { node: root, kids: root.Kids(), next: 0 },
  ];
  const onPath = new Set<PDFPageTree>([root]);

  while (stack.length > 0) {
    const top = stack[stack.length - 1]!;
    if (top.next >= top.kids.size()) {
      stack.pop();
      onPath.delete(top.node);
      continue;
    }
    const kid = context.lookup(top.kids.get(top.next++));
    if (++visits > maxVisits) throw new Refusal('tree-too-large');
    if (kid instanceof PDFPageTree) {
      if (onPath.has(kid)) throw new Refusal('tree-cycle');
      if (stack.length >= MAX_PAGE_TREE_DEPTH) throw new Refusal('tree-too-deep');
      stack.push({ node: kid, kids: kid.Kids(), next: 0 });
      onPath.add(kid);
    } else if (kid instanceof PDFPageLeaf) {
      if (++pages > pageBudget) throw new Refusal('too-many-pages');
      checkParentChain(kid, parentsChecked);
    }
  }
  return pages;
}

/** pdf-lib climbs `/Parent` recursively when copying a page: the chain must end, soon. */
function checkParentChain(leaf: PDFPageLeaf, checked: Set<PDFObject>): void {
  const chain: PDFObject[] = [];
  let node: PDFObject | undefined = leaf.Parent();
  while (node !== undefined && !checked.has(node)) {
    if (!(node instanceof PDFPageTree || node instanceof PDFPageLeaf)) {
      throw new Error('a /Parent is not a page tree node');
    }
    if (chain.length >= MAX_PAGE_TREE_DEPTH) throw new Refusal('tree-too-deep');
    chain.push(node);
    node = node.Parent();
  }
  for (const n of chain) checked.add(n);
}

/** Attributes a page inherits from its ancestors in the page tree (ISO 32000-1, 7.7.3.4). */
const INHERITABLE = ['MediaBox', 'CropBox', 'Resources', 'Rotate'].map((key) => PDFName.of(key));

/**
 * Gives a document whose page tree is lost (or empty) a new one made of the
 * `/Type /Page` dictionaries that survive in it, and returns how many there
 * are (0: none survive and nothing is changed). Meant for damaged files whose
 * page-tree root was destroyed while the pages themselves were not.
 *
 * - Order: the pages go in object-number order. The real order lived in the
 *   lost tree and cannot be known; producers usually number page objects in
 *   reading order, so object order is the best guess. (qpdf renumbers the
 *   objects it writes but keeps these in their original order: the corpus's
 *   unreadablemetadata.pdf has its pages in objects 1, 43 and 178, 1, 43 and
 *   117 after qpdf.)
 * - Structure: one new /Pages node, every page a direct kid (/Kids, /Count,
 *   each page's /Parent rewritten). It is the catalog's /Pages from then on.
 * - Inherited attributes (/MediaBox, /CropBox, /Resources, /Rotate): a page
 *   lacking one takes it from its old ancestors if some of them survive.
 *   What lived on the lost root is gone, so a page without a usable /MediaBox
 *   gets `RECOVERED_PAGE_MEDIA_BOX` (A4) and one without /Resources an empty
 *   dictionary; a missing /Rotate means 0, the default, and is left out.
 * - Limits: collecting stops past `pageBudget` (413); the caller walks the
 *   new tree with every check an original tree gets.
 */
export function rebuildPageTree(doc: PDFDocument, pageBudget: number): number {
  const context = doc.context;
  const typeKey = PDFName.of('Type');
  const pageType = PDFName.of('Page');

  const leaves: [PDFRef, PDFPageLeaf][] = [];
  // Sorted by object number (pdf-lib's enumerateIndirectObjects sorts).
  for (const [ref, object] of context.enumerateIndirectObjects()) {
    if (!(object instanceof PDFDict) || object.get(typeKey) !== pageType) continue;
    if (leaves.length >= pageBudget) throw new Refusal('too-many-pages');
    let leaf: PDFPageLeaf;
    if (object instanceof PDFPageLeaf) {
      leaf = object;
    } else {
      // pdf-lib's parser makes every /Type /Page dictionary a PDFPageLeaf; just in case.
      leaf = PDFPageLeaf.fromMapWithContext(new Map(object.entries()), context);
      context.assign(ref, leaf);
    }
    leaves.push([ref, leaf]);
  }
  if (leaves.length === 0) return 0;

  const root = PDFPageTree.withContext(context);
  const rootRef = context.register(root);
  const kids = root.Kids();
  for (const [ref, leaf] of leaves) {
    for (const key of INHERITABLE) {
      if (leaf.get(key) !== undefined) continue;
      const value = inheritedFromOldAncestors(doc, leaf, key);
      if (value !== undefined) leaf.set(key, value);
    }
    if (!isUsableBox(doc, leaf.get(PDFName.of('MediaBox')))) {
      leaf.set(PDFName.of('MediaBox'), context.obj([...RECOVERED_PAGE_MEDIA_BOX]));
    }
    if (!(context.lookup(leaf.get(PDFName.of('Resources'))) instanceof PDFDict)) {
      leaf.set(PDFName.of('Resources'), context.obj({}));
    }
    leaf.setParent(rootRef);
    kids.push(ref);
  }
  root.set(PDFName.of('Count'), PDFNumber.of(leaves.length));
  doc.catalog.set(PDFName.of('Pages'), rootRef);
  return leaves.length;
}

/**
 * `key` from the nearest surviving ancestor of `leaf` in its old tree, climbing
 * /Parent iteratively, at most `MAX_PAGE_TREE_DEPTH` nodes and never in a loop.
 */
function inheritedFromOldAncestors(
  doc: PDFDocument,
  leaf: PDFDict,
  key: PDFName,
): PDFObject | undefined {
  const parentKey = PDFName.of('Parent');
  const seen = new Set<PDFDict>();
  let node = doc.context.lookup(leaf.get(parentKey));
  while (node instanceof PDFDict && !seen.has(node) && seen.size < MAX_PAGE_TREE_DEPTH) {
    seen.add(node);
    const value = node.get(key);
    if (value !== undefined) return value;
    node = doc.context.lookup(node.get(parentKey));
  }
  return undefined;
}

/** A rectangle of four numbers with a positive width and height. */
function isUsableBox(doc: PDFDocument, value: PDFObject | undefined): boolean {
  const box = doc.context.lookup(value);
  if (!(box instanceof PDFArray) || box.size() !== 4) return false;
  const items = box.asArray().map((item) => doc.context.lookup(item));
  if (!items.every((item): item is PDFNumber => item instanceof PDFNumber)) return false;
  const [x1, y1, x2, y2] = items.map((item) => item.asNumber());
  const width = Math.abs(x2! - x1!);
  const height = Math.abs(y2! - y1!);
  return Number.isFinite(width) && Number.isFinite(height) && width > 0 && height > 0;
}
