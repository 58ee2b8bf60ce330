return createRcsimEngine;
}
var createRcsimEngine = rcsimEngineScope();
if (typeof module === 'object' && module.exports) module.exports = createRcsimEngine;
