/*
 * MathJax 2 -> 3 shim for the widget embedder.
 *
 * @jupyter-widgets/html-manager 1.x typesets widget text with MathJax 2's API,
 *   MathJax.Hub.Queue(["Typeset", MathJax.Hub, element])
 * whenever window.MathJax exists. The book loads MathJax 3, which has no Hub, so without this shim
 * every widget on a page with maths throws a TypeError. We give the MathJax 3 object a minimal Hub
 * whose Queue typesets the element with MathJax 3's typesetPromise.
 *
 * Loaded (by nb_ipywidgets_js in _config.yml) before embed.js, on pages that have widgets.
 */
(function () {
  "use strict";

  function typeset(elements) {
    var mj = window.MathJax;
    if (!mj || !mj.startup || !mj.startup.promise) {
      return;
    }
    mj.startup.promise
      .then(function () {
        return mj.typesetPromise(elements);
      })
      .catch(function (err) {
        console.warn("MathJax could not typeset a widget:", err);
      });
  }

  var hub = {
    Queue: function () {
      for (var i = 0; i < arguments.length; i++) {
        var job = arguments[i];
        if (typeof job === "function") {
          job();
        } else if (Array.isArray(job) && job[0] === "Typeset") {
          typeset(job[2] ? [job[2]] : undefined);
        }
      }
    },
    Typeset: function (element) {
      typeset(element ? [element] : undefined);
    },
  };

  function install() {
    var mj = window.MathJax;
    // Only the loaded MathJax 3 object (it has a version); before it loads, window.MathJax may be
    // the configuration object, which MathJax 3 replaces.
    if (mj && mj.version && !mj.Hub) {
      mj.Hub = hub;
    }
  }

  install();
  document.addEventListener("DOMContentLoaded", install);
  // html-manager renders on "load"; capture phase runs before its (bubbling) listener.
  window.addEventListener("load", install, true);
})();
