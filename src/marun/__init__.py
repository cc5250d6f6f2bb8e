"""marun: the entrypoint of distributed training containers on ModelArts-style platforms.

Nothing is imported here on purpose: `marun run` sits in front of every training process, so the
package import must cost nothing beyond what the chosen command needs.
"""

__version__ = "0.1.0"
