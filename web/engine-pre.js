// web/engine.js = this line, emcc's output, web/engine-post.js (see web/CMakeLists.txt): the engine
// wrapped in one function so that web/app.js can start a Web Worker from its source text.
function rcsimEngineScope() {
