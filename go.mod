module github.com/routebalance/routebalance

go 1.26.8
