module lockbroker.dev/lockbroker/examples/claimfirst

go 1.19

require (
	github.com/lib/pq v1.10.7
	lockbroker.dev/lockbroker v0.0.0
)

replace lockbroker.dev/lockbroker => ../..
