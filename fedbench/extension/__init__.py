"""Layer 5, for authors of new methods: the algorithm contract (:mod:`.contract`) and the plugin
package scaffold (:mod:`.scaffold`).  May import layers 0-5."""
