"""The learning-rate range test (Find LR): ``find`` runs it (``lr_find``), ``rates`` gives its rates, ``curve`` reads
its curve and suggestion, ``result`` holds what it found (``LRFind``), ``muon`` converts Muon rates between scaling
conventions. ``rlnb.sweep`` gives the public names."""
