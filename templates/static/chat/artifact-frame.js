// The artifact preview frame's own code (chat/artifact_frame.html; chat.artifacts on the server).
// It runs in <iframe sandbox="allow-scripts"> under the frame's CSP: an opaque origin, no network.
// Protocol: this frame posts {type: "artifact-ready"} to its parent once; the parent answers with
// {type: "artifact-render", kind: "html" | "svg" | "mermaid", source, labels}. Only a message
// whose source is this frame's parent window is read, and only the first one: after that the
// document belongs to the artifact. Nothing else is ever posted back.
(function () {
  "use strict";

  var mermaidUrl = document.currentScript && document.currentScript.getAttribute("data-mermaid");
  var rendered = false;

  // A bare canvas for an SVG image or a Mermaid diagram: centred, scaled down to fit.
  var CANVAS_STYLE = "html,body{margin:0;min-height:100%;background:#fff;color:#1d2330}" +
    "body{display:flex;align-items:center;justify-content:center;min-height:100vh;padding:16px;box-sizing:border-box;" +
    "font:14px/1.5 system-ui,sans-serif}body>svg,#diagram>svg{max-width:100%;height:auto}" +
    "#diagram{max-width:100%}.artifact-error{color:#b42318;white-space:pre-wrap;max-width:40em}";

  function writeDocument(html) {
    // Replaces this document (and this script's listeners with it) by the artifact; the
    // response's CSP stays in force for everything it contains.
    document.open();
    document.write(html);
    document.close();
  }

  function canvas() {
    var style = document.createElement("style");
    style.textContent = CANVAS_STYLE;
    document.head.appendChild(style);
    return document.body;
  }

  function showError(text) {
    var p = document.createElement("p");
    p.className = "artifact-error";
    p.setAttribute("role", "alert");
    p.textContent = text;
    canvas().replaceChildren(p);
  }

  function renderMermaid(source, labels) {
    var script = document.createElement("script");
    script.src = mermaidUrl;
    script.onerror = function () { showError(labels.loadFailed || "Could not load the diagram renderer."); };
    script.onload = function () {
      var mermaid = window.mermaid;
      // "strict": labels are text, no click handlers or links in the diagram.
      mermaid.initialize({startOnLoad: false, securityLevel: "strict", theme: "default"});
      mermaid.render("artifact-diagram", source).then(function (result) {
        var holder = document.createElement("div");
        holder.id = "diagram";
        holder.innerHTML = result.svg;
        canvas().replaceChildren(holder);
      }, function (error) {
        showError((labels.diagramError || "This diagram has an error:") + "\n" +
          String((error && error.message) || error));
      });
    };
    document.head.appendChild(script);
  }

  window.addEventListener("message", function (event) {
    if (rendered || event.source !== window.parent) return;
    var data = event.data;
    if (!data || data.type !== "artifact-render" || typeof data.source !== "string") return;
    rendered = true;
    var labels = data.labels || {};
    if (data.kind === "mermaid") {
      renderMermaid(data.source, labels);
    } else if (data.kind === "svg") {
      writeDocument("<!doctype html><html><head><meta charset=\"utf-8\"><style>" + CANVAS_STYLE +
        "</style></head><body>" + data.source + "</body></html>");
    } else {
      writeDocument(data.source);
    }
  });

  window.parent.postMessage({type: "artifact-ready"}, "*");
})();
