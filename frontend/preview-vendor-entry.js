// The artifact preview frame's one library, bundled by `make vendor` into a classic script
// (templates/static/vendor/preview-vendor.js; the frame is sandboxed with an opaque origin, so a
// module script would need CORS): Mermaid, exposed as window.mermaid. The chat page never loads it.
import mermaid from "mermaid";

globalThis.mermaid = mermaid;
